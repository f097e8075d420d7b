package bgp

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// md5Prober checks that the kernel accepts a TCP MD5 key for a peer.
type md5Prober func(peer netip.Addr) error

// probeMD5 sets a throwaway TCP_MD5SIG key on a fresh socket: kernels built
// without CONFIG_TCP_MD5SIG (and some sandboxes) refuse it, and gobgp then
// only logs a warning while the session silently never comes up.
func probeMD5(peer netip.Addr) error {
	fam := unix.AF_INET
	if peer.Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	sig := unix.TCPMD5Sig{Keylen: 4}
	copy(sig.Key[:], "test")
	if peer.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sig.Addr))
		sa.Family = unix.AF_INET
		sa.Addr = peer.As4()
	} else {
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&sig.Addr))
		sa.Family = unix.AF_INET6
		sa.Addr = peer.As16()
	}
	if err := unix.SetsockoptTCPMD5Sig(fd, unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig); err != nil {
		return fmt.Errorf("setsockopt TCP_MD5SIG: %w", err)
	}
	return nil
}

// abortSessions closes (FIN, no BGP NOTIFICATION) every established TCP
// connection of this process to one of peers (address -> its BGP port)
// that uses the BGP port on either end: our listen port, or the peer's. gobgp has no way to drop a session silently: stopping it
// sends a Cease, on which a peer withdraws our routes at once (RFC 4724
// keeps routes only when the TCP session just ends). Cutting the sockets
// first makes an agent restart look like the restart it is, and peers keep
// our routes for the graceful-restart time.
//
// Sockets are found through /proc/self/net/tcp{,6} (their inode) and
// /proc/self/fd; each descriptor is duplicated and its inode checked before
// the shutdown, so a descriptor number reused in between is never touched.
func abortSessions(peers map[netip.Addr]uint16, port uint16) (int, error) {
	if len(peers) == 0 {
		return 0, nil
	}
	inodes := map[uint64]bool{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		if err := scanTCP(f, func(local, remote netip.AddrPort, state string, inode uint64) {
			peerPort, ok := peers[remote.Addr().Unmap()]
			if ok && state == "01" && (local.Port() == port || remote.Port() == peerPort) {
				inodes[inode] = true
			}
		}); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	if len(inodes) == 0 {
		return 0, nil
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("list descriptors: %w", err)
	}
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
		if err != nil || !inodes[ino] {
			continue
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(dup, &st); err == nil && st.Ino == ino {
			if unix.Shutdown(dup, unix.SHUT_RDWR) == nil {
				n++
			}
		}
		unix.Close(dup)
	}
	return n, nil
}

// scanTCP calls fn for every socket listed in a /proc/net/tcp-format file.
func scanTCP(path string, fn func(local, remote netip.AddrPort, state string, inode uint64)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		local, err1 := parseProcAddr(fields[1])
		remote, err2 := parseProcAddr(fields[2])
		inode, err3 := strconv.ParseUint(fields[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		fn(local, remote, fields[3], inode)
	}
	return sc.Err()
}

// parseProcAddr reads "0100007F:00B3": the address as the kernel prints it
// (each 32-bit word in host byte order), then the port.
func parseProcAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	out := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(out[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", s)
	}
	a, _ := netip.AddrFromSlice(out)
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
}
