package ociimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Packages are the Debian packages of the base layer: the Dockerfile's
// (iptables, ipset, iproute2, ca-certificates) and base-files, the
// directory skeleton and os-release every Debian image has (it brings
// mawk, its awk).
var Packages = []string{"base-files", "iptables", "ipset", "iproute2", "ca-certificates"}

// Deb is one package of the resolved closure.
type Deb struct {
	Name, Version, Arch string
}

// File is the name apt gives the package in its archive cache: an epoch's
// colon is escaped.
func (d Deb) File() string {
	return d.Name + "_" + strings.ReplaceAll(d.Version, ":", "%3a") + "_" + d.Arch + ".deb"
}

// instLine is apt-get's simulation output for a package it would install:
// "Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64])".
var instLine = regexp.MustCompile(`^Inst (\S+) \((\S+) .*\[(\S+)\]\)`)

// aptArgs are the options that make apt-get work on an empty system of its
// own: no installed package (status), our archive cache, no locks on the
// host's dpkg (Builds hold their own lock), no recommends.
func aptArgs(status, archives string) []string {
	return []string{
		"-o", "Dir::State::status=" + status,
		"-o", "Dir::Cache::archives=" + archives,
		"-o", "Debug::NoLocking=1",
		"-o", "APT::Install-Recommends=0",
		"-o", "APT::Install-Suggests=0",
		"-o", "APT::Sandbox::User=root",
		"--yes", "--quiet",
	}
}

// Resolve asks apt-get which packages installing pkgs on an empty system
// takes (the dependency closure, in apt's install order) and downloads
// those missing from archives (a directory of .debs). apt-get verifies the
// package lists' signatures and every package's hash.
func Resolve(ctx context.Context, archives string, pkgs []string) ([]Deb, error) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return nil, errors.New("apt-get not found: the image's packages come from the host's Debian (or derived) package sources")
	}
	if err := os.MkdirAll(archives+"/partial", 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", archives, err)
	}
	status := archives + "/empty-status"
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", status, err)
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", append(append(aptArgs(status, archives), args...), pkgs...)...)
		cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			hint := ""
			if strings.Contains(stderr.String(), "Unable to locate package") || strings.Contains(stderr.String(), "has no installation candidate") {
				hint = " (no package lists? run apt-get update)"
			}
			return nil, fmt.Errorf("apt-get %s %s: %w%s\n%s", strings.Join(args, " "), strings.Join(pkgs, " "), err, hint, stderr.Bytes())
		}
		return out, nil
	}
	out, err := run("install", "--simulate")
	if err != nil {
		return nil, err
	}
	var debs []Deb
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := instLine.FindStringSubmatch(sc.Text()); m != nil {
			debs = append(debs, Deb{Name: m[1], Version: m[2], Arch: m[3]})
		}
	}
	if len(debs) == 0 {
		return nil, fmt.Errorf("apt-get resolved no packages for %s:\n%s", strings.Join(pkgs, " "), out)
	}
	missing := false
	for _, d := range debs {
		if _, err := os.Stat(archives + "/" + d.File()); err != nil {
			missing = true
		}
	}
	if missing {
		if _, err := run("install", "--download-only"); err != nil {
			return nil, err
		}
	}
	for _, d := range debs {
		if _, err := os.Stat(archives + "/" + d.File()); err != nil {
			return nil, fmt.Errorf("package %s: apt-get downloaded no %s", d.Name, d.File())
		}
	}
	return debs, nil
}

// slimExcluded reports whether a path (without leading slash) is left out
// of the image, as Debian's slim images configure dpkg to do: docs (but
// copyrights), man and info pages, translations, lintian overrides.
func slimExcluded(name string) bool {
	for _, dir := range []string{"usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/groff/", "usr/share/lintian/", "usr/share/linda/"} {
		if strings.HasPrefix(name, dir) && name != dir {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(name, "usr/share/doc/"); ok {
		return strings.Contains(rest, "/") && !strings.HasSuffix(rest, "/") && path.Base(rest) != "copyright"
	}
	return false
}

// mergedUsr maps a package's path onto a merged-/usr root, as dpkg
// unpacks it there: /bin, /sbin, /lib, /lib64 are links into /usr. ok is
// false for the top directories themselves (the links stand in for them).
func mergedUsr(name string) (string, bool) {
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		if name == top+"/" || name == top {
			return "", false
		}
		if strings.HasPrefix(name, top+"/") {
			return "usr/" + name, true
		}
	}
	return name, true
}

// baseSkeleton is what the base layer has before any package: the
// merged-/usr links, /var/run and /var/lock as base-files' postinst
// makes them, and the accounts base-passwd would write.
func baseSkeleton(l *Layer) {
	for _, d := range []string{"usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "run", "var"} {
		l.Dir(d, 0o755)
	}
	l.Dir("run/lock", 0o1777)
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		l.Symlink(top, "usr/"+top)
	}
	l.Symlink("var/run", "/run")
	l.Symlink("var/lock", "/run/lock")
	l.Dir("etc", 0o755)
	l.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"))
	l.File("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
}

// alternative is one link update-alternatives manages.
type alternative struct {
	link, name, target string
	priority           int
	slaves             []alternative
}

// alternatives reads the update-alternatives --install calls of a
// maintainer script. Conditions around them are ignored: for the
// packages of this image they all run on configure.
func alternatives(script string) []alternative {
	script = strings.ReplaceAll(script, "\\\n", " ")
	var out []alternative
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "update-alternatives" {
			continue
		}
		for i := 1; i < len(f); i++ {
			switch {
			case f[i] == "--install" && i+4 < len(f):
				prio, err := strconv.Atoi(f[i+4])
				if err != nil {
					continue
				}
				out = append(out, alternative{link: f[i+1], name: f[i+2], target: f[i+3], priority: prio})
				i += 4
			case f[i] == "--slave" && i+3 < len(f) && len(out) > 0:
				last := &out[len(out)-1]
				last.slaves = append(last.slaves, alternative{link: f[i+1], name: f[i+2], target: f[i+3]})
				i += 3
			}
		}
	}
	return out
}

// chooseAlternatives is update-alternatives' automatic mode: per name the
// highest priority wins.
func chooseAlternatives(all []alternative) []alternative {
	best := map[string]alternative{}
	for _, a := range all {
		if b, ok := best[a.name]; !ok || a.priority > b.priority {
			best[a.name] = a
		}
	}
	names := make([]string, 0, len(best))
	for n := range best {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]alternative, 0, len(names))
	for _, n := range names {
		out = append(out, best[n])
	}
	return out
}

// writeBase unpacks debs (from archives) into l over baseSkeleton, then
// does what their maintainer scripts would have done that the image needs:
// the alternatives' links and the CA bundle.
func writeBase(ctx context.Context, l *Layer, archives string, debs []Deb) error {
	baseSkeleton(l)
	var alts []alternative
	certs := map[string][]byte{} // usr/share/ca-certificates/... → PEM
	for _, d := range debs {
		file := archives + "/" + d.File()
		script, err := controlFile(ctx, file, "postinst")
		if err != nil {
			return err
		}
		alts = append(alts, alternatives(script)...)

		cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", file)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("dpkg-deb %s: %w (is dpkg installed?)", d.File(), err)
		}
		err = unpack(l, tar.NewReader(stdout), certs)
		io.Copy(io.Discard, stdout)
		if werr := cmd.Wait(); err == nil && werr != nil {
			err = fmt.Errorf("%w: %s", werr, stderr.Bytes())
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w", d.File(), err)
		}
	}
	if len(alts) > 0 {
		l.Dir("etc/alternatives", 0o755)
	}
	inLayer := func(p string) bool {
		name, _ := mergedUsr(strings.TrimPrefix(p, "/"))
		return l.Has(name)
	}
	for _, a := range chooseAlternatives(alts) {
		if !inLayer(a.target) {
			return fmt.Errorf("alternative %s: no %s in the image", a.name, a.target)
		}
		for _, link := range append([]alternative{a}, a.slaves...) {
			// As update-alternatives: no slave link to a file that is
			// not there (here: man pages left out).
			if !inLayer(link.target) {
				continue
			}
			name, _ := mergedUsr(strings.TrimPrefix(link.link, "/"))
			if l.Has(name) {
				return fmt.Errorf("alternative %s: %s is a file of a package", link.name, link.link)
			}
			l.Symlink("etc/alternatives/"+link.name, link.target)
			l.Symlink(name, "/etc/alternatives/"+link.name)
		}
	}
	// update-ca-certificates: every certificate ca-certificates ships
	// (its debconf default selects all) in one bundle, sorted by path.
	if len(certs) > 0 {
		paths := make([]string, 0, len(certs))
		for p := range certs {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		var bundle bytes.Buffer
		for _, p := range paths {
			bundle.Write(certs[p])
			if !bytes.HasSuffix(certs[p], []byte("\n")) {
				bundle.WriteByte('\n')
			}
		}
		l.Dir("etc/ssl", 0o755)
		l.Dir("etc/ssl/certs", 0o755)
		l.File("etc/ssl/certs/ca-certificates.crt", 0o644, bundle.Bytes())
	}
	return nil
}

// unpack copies a package's data tar into l.
func unpack(l *Layer, tr *tar.Reader, certs map[string][]byte) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name == "" || slimExcluded(name) {
			continue
		}
		name, ok := mergedUsr(name)
		if !ok {
			continue
		}
		if h.Typeflag == tar.TypeDir && l.Has(strings.TrimSuffix(name, "/")) {
			continue // also a directory a link of the skeleton stands for
		}
		h.Name = name
		if h.Typeflag == tar.TypeLink {
			h.Linkname, _ = mergedUsr(strings.TrimPrefix(h.Linkname, "./"))
		}
		var body io.Reader = tr
		if h.Typeflag == tar.TypeReg && strings.HasPrefix(name, "usr/share/ca-certificates/") && strings.HasSuffix(name, ".crt") {
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			certs[name] = data
			body = bytes.NewReader(data)
		}
		l.Add(h, body)
		if l.err != nil {
			return l.err
		}
	}
}

// controlFile returns a file of a package's control archive ("" when the
// package has none).
func controlFile(ctx context.Context, deb, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "--ctrl-tarfile", deb).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-deb --ctrl-tarfile %s: %w", deb, err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("control archive of %s: %w", deb, err)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			data, err := io.ReadAll(tr)
			return string(data), err
		}
	}
}
