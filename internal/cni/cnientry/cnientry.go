// Package cnientry is the first thing the binary does when it runs as the
// CNI plugin: hand the command to the node's agent over a unix socket, and
// exit with the agent's answer before the rest of the binary is even
// initialised.
//
// Why: kubelet and containerd execute /opt/cni/bin/calico (and
// calico-ipam) for every pod, and a Go process pays for the package init
// of everything linked into the binary before main runs: the embedded
// etcd server, gobgp, Prometheus collectors, ~10 ms on these machines,
// where the reference ptp plugin starts in 3 ms. Go initialises packages
// in dependency order, then by import path; this package imports only
// os, syscall and encoding/json, so its init runs after ~75 small
// standard-library packages (~1 ms) and before everything else. The agent
// (cni.Server) already holds a warm etcd connection and runs the same
// plugin code in-process.
//
// Protocol (one request per connection): the plugin writes a JSON
// Request (its environment, stdin, the plugin name and ProtocolVersion)
// and half-closes the socket; the pod's network namespace, when
// CNI_NETNS names one, travels as a file descriptor (SCM_RIGHTS) with the
// first bytes, so the agent needs no view of the runtime's netns mounts.
// A DEL whose namespace is already gone travels without one (NetNSFD
// false): the agent then deletes as for a namespace gone.
// The agent first writes one byte, Taken, once it has read the whole
// request, then a JSON Response, and closes: either Declined (the plugin
// then carries on in-process, as if no agent ran) or the exit code and the
// stdout and stderr the plugin is to write.
//
// Fallback: no socket, nobody listening, a refused or failed send, a
// connection lost before Taken (an agent stopping with the request still
// queued), or a Declined answer: init returns and package cnimain's init
// runs the plugin in this process (package cni), so CNI works while the
// agent is down or restarting. After Taken the agent may have started the work: a lost
// answer is then an error the runtime retries (code 11), except for DEL,
// which is idempotent and simply runs again here.
package cnientry

import (
	"encoding/json"
	"os"
	"syscall"
)

// Plugin names as installed in the CNI bin dir (package cni uses these:
// this package must stay free of cni's imports).
const (
	NetworkPlugin = "calico"
	IPAMPlugin    = "calico-ipam"
)

// ProtocolVersion changes whenever Request or Response change meaning.
const ProtocolVersion = 2

// Taken is the byte the agent writes once it has read a request.
const Taken = 'T'

// DefaultSocket is where the agent listens on a node.
const DefaultSocket = "/var/run/calico/cni.sock"

// SocketEnv overrides DefaultSocket (tests and several nodes on one host);
// "none" disables forwarding.
const SocketEnv = "CALICO_CNI_SOCKET"

// Request is what the plugin process forwards.
type Request struct {
	Version int      `json:"version"`
	Plugin  string   `json:"plugin"`
	Env     []string `json:"env"`
	Stdin   []byte   `json:"stdin"`
	// NetNSFD: the request carries the netns as a file descriptor.
	NetNSFD bool `json:"netnsFD,omitempty"`
	// HostNetNS identifies the plugin's own network namespace (the
	// node's, where the host end of the veth goes): the agent serves only
	// plugins in its own namespace.
	HostNetNS string `json:"hostNetNS"`
}

// NetNSID identifies the network namespace of the calling thread.
func NetNSID() string {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return ""
	}
	return itoa(st.Dev) + ":" + itoa(st.Ino)
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}

// Response is the agent's answer.
type Response struct {
	// Declined says why the agent did not run the command; the plugin
	// runs it itself.
	Declined string `json:"declined,omitempty"`
	ExitCode int    `json:"exitCode"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
}

// answerTimeout bounds the wait for the agent (the plugin's own deadline
// for a command is 60 s; a runtime waits minutes).
const answerTimeout = 90

func init() {
	name := os.Args[0]
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			name = name[i+1:]
			break
		}
	}
	if name != NetworkPlugin && name != IPAMPlugin {
		return
	}
	if code, ok := forward(name); ok {
		os.Exit(code)
	}
}

// forward hands the command to the agent; ok is false when this process
// must run it itself.
func forward(plugin string) (code int, ok bool) {
	switch os.Getenv("CNI_COMMAND") {
	case "ADD", "DEL", "CHECK":
	default:
		return 0, false
	}
	path := os.Getenv(SocketEnv)
	switch path {
	case "none":
		return 0, false
	case "":
		path = DefaultSocket
	}
	stdin, err := readAll(os.Stdin)
	if err != nil {
		return 0, false
	}
	// Whatever happens next, the in-process path must still see stdin.
	ok = false
	defer func() {
		if !ok {
			restoreStdin(stdin)
		}
	}()
	req := Request{Version: ProtocolVersion, Plugin: plugin, Env: os.Environ(), Stdin: stdin, HostNetNS: NetNSID()}
	nsFD := -1
	if p := os.Getenv("CNI_NETNS"); p != "" {
		nsFD, err = syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		switch {
		case err == nil:
			defer syscall.Close(nsFD)
			req.NetNSFD = true
		case err == syscall.ENOENT && os.Getenv("CNI_COMMAND") == "DEL":
			// The runtime removed the namespace before the DEL (a pod
			// being deleted, a DEL retried): the agent still releases
			// the addresses, deletes the endpoint and removes the host
			// veth by name, as the plugin would with no namespace.
			nsFD = -1
		default:
			return 0, false // a missing netns is the plugin's error to report
		}
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return 0, false
	}
	sock, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer syscall.Close(sock)
	if err := syscall.Connect(sock, &syscall.SockaddrUnix{Name: path}); err != nil {
		return 0, false // no agent: run here
	}
	if err := send(sock, msg, nsFD); err != nil {
		return 0, false
	}
	tv := syscall.Timeval{Sec: answerTimeout}
	_ = syscall.SetsockoptTimeval(sock, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	answer, err := readAllFD(sock)
	if len(answer) == 0 || answer[0] != Taken {
		return 0, false // the agent never took the request: run it here
	}
	var resp Response
	if err == nil {
		err = json.Unmarshal(answer[1:], &resp)
	}
	if err != nil {
		if os.Getenv("CNI_COMMAND") == "DEL" {
			return 0, false // idempotent: do it here
		}
		os.Stdout.Write(tryAgain("the calico-node agent at " + path + " did not answer: " + err.Error()))
		return 11, true
	}
	if resp.Declined != "" {
		return 0, false
	}
	os.Stderr.Write(resp.Stderr)
	os.Stdout.Write(resp.Stdout)
	return resp.ExitCode, true
}

// send writes msg, the netns descriptor riding with the first bytes, then
// half-closes: the agent reads to EOF.
func send(sock int, msg []byte, nsFD int) error {
	var oob []byte
	if nsFD >= 0 {
		oob = syscall.UnixRights(nsFD)
	}
	for len(msg) > 0 {
		n, err := syscall.SendmsgN(sock, msg, oob, nil, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		msg, oob = msg[n:], nil
	}
	return syscall.Shutdown(sock, syscall.SHUT_WR)
}

func readAll(f *os.File) ([]byte, error) { return readAllFD(int(f.Fd())) }

func readAllFD(fd int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return out, err // what came before the error counts (Taken)
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// restoreStdin puts the bytes already read back in front of the plugin:
// a pipe holding them replaces fd 0.
func restoreStdin(data []byte) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return
	}
	// A pipe buffers 64 KiB; a CNI config is far smaller, but never block.
	go func() {
		for len(data) > 0 {
			n, err := syscall.Write(p[1], data)
			if err != nil {
				break
			}
			data = data[n:]
		}
		syscall.Close(p[1])
	}()
	if err := syscall.Dup3(p[0], 0, 0); err == nil {
		syscall.Close(p[0])
	}
}

// tryAgain is the CNI error (code 11, try again later) JSON.
func tryAgain(msg string) []byte {
	b, _ := json.Marshal(struct {
		CNIVersion string `json:"cniVersion"`
		Code       int    `json:"code"`
		Msg        string `json:"msg"`
	}{"1.0.0", 11, msg})
	return append(b, '\n')
}
