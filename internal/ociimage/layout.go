package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// epoch is the modification time of every entry the builder makes itself
// (directories, links, the binary): a fixed time keeps digests
// reproducible.
var epoch = time.Unix(0, 0).UTC()

// Layer is an uncompressed layer tar being written to a file; its digest
// is computed on the way.
type Layer struct {
	f    *os.File
	h    hash.Hash
	tw   *tar.Writer
	seen map[string]bool // entry names written (directories may repeat across packages)
	err  error
}

// NewLayer starts a layer in a new file at path.
func NewLayer(path string) (*Layer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create layer %s: %w", path, err)
	}
	h := sha256.New()
	return &Layer{f: f, h: h, tw: tar.NewWriter(io.MultiWriter(f, h)), seen: map[string]bool{}}, nil
}

// Dir adds a directory (name without leading or trailing slash) unless
// the layer has it already.
func (l *Layer) Dir(name string, mode int64) {
	l.Add(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: epoch}, nil)
}

// File adds a regular file.
func (l *Layer) File(name string, mode int64, data []byte) {
	l.Add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}, bytes.NewReader(data))
}

// Symlink adds a symbolic link name → target.
func (l *Layer) Symlink(name, target string) {
	l.Add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: epoch}, nil)
}

// Has reports whether the layer has an entry name (a directory without its
// trailing slash).
func (l *Layer) Has(name string) bool { return l.seen[name] || l.seen[name+"/"] }

// Add writes an entry with its content (nil for all but regular files).
// Owner names are dropped (ids stay) and PAX records cleared, so that the
// bytes depend on nothing but the entry. A directory already in the layer
// is skipped; any other duplicate is an error: two packages would own the
// same path.
func (l *Layer) Add(h *tar.Header, body io.Reader) {
	if l.err != nil {
		return
	}
	if l.seen[h.Name] {
		if h.Typeflag == tar.TypeDir {
			return
		}
		l.err = fmt.Errorf("layer entry %s written twice", h.Name)
		return
	}
	l.seen[h.Name] = true
	hdr := &tar.Header{
		Typeflag: h.Typeflag, Name: h.Name, Linkname: h.Linkname, Mode: h.Mode,
		Uid: h.Uid, Gid: h.Gid, Size: h.Size, ModTime: h.ModTime.UTC().Truncate(time.Second),
		Devmajor: h.Devmajor, Devminor: h.Devminor, Format: tar.FormatPAX,
	}
	if hdr.Typeflag != tar.TypeReg {
		hdr.Size = 0
	}
	if err := l.tw.WriteHeader(hdr); err != nil {
		l.err = fmt.Errorf("layer entry %s: %w", h.Name, err)
		return
	}
	if hdr.Size > 0 {
		if _, err := io.CopyN(l.tw, body, hdr.Size); err != nil {
			l.err = fmt.Errorf("layer entry %s: %w", h.Name, err)
		}
	}
}

// Close finishes the layer and returns its descriptor.
func (l *Layer) Close() (Blob, error) {
	if l.err == nil {
		l.err = l.tw.Close()
	}
	st, statErr := l.f.Stat()
	if err := l.f.Close(); l.err == nil {
		l.err = err
	}
	if l.err == nil {
		l.err = statErr
	}
	if l.err != nil {
		return Blob{}, fmt.Errorf("write layer %s: %w", l.f.Name(), l.err)
	}
	return Blob{Path: l.f.Name(), Digest: "sha256:" + hex.EncodeToString(l.h.Sum(nil)), Size: st.Size()}, nil
}

// Blob is content addressed by its digest, kept in a file.
type Blob struct {
	Path   string
	Digest string // "sha256:<hex>"
	Size   int64
}

// Image is what WriteArchive writes.
type Image struct {
	// Name is the reference the image is imported as,
	// e.g. "localhost:5000/calico-node:dev".
	Name string
	// Arch is the GOARCH-style architecture ("amd64").
	Arch       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	Labels     map[string]string
	// Layers, bottom first; each an uncompressed tar.
	Layers []Blob
}

// WriteArchive writes img as an OCI image layout tar to out (atomically)
// and returns the manifest's digest, the image's identity.
func WriteArchive(out string, img Image) (string, error) {
	diffIDs := make([]string, len(img.Layers))
	layers := make([]any, len(img.Layers))
	for i, l := range img.Layers {
		diffIDs[i] = l.Digest
		layers[i] = map[string]any{"mediaType": mediaLayer, "digest": l.Digest, "size": l.Size}
	}
	cfg := map[string]any{"WorkingDir": "/"}
	if len(img.Env) > 0 {
		cfg["Env"] = img.Env
	}
	if len(img.Entrypoint) > 0 {
		cfg["Entrypoint"] = img.Entrypoint
	}
	if len(img.Cmd) > 0 {
		cfg["Cmd"] = img.Cmd
	}
	if len(img.Labels) > 0 {
		cfg["Labels"] = img.Labels
	}
	config, err := json.Marshal(map[string]any{
		"architecture": img.Arch, "os": "linux", "config": cfg,
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return "", fmt.Errorf("image %s: config: %w", img.Name, err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaManifest,
		"config": map[string]any{"mediaType": mediaConfig, "digest": digest(config), "size": len(config)},
		"layers": layers,
	})
	if err != nil {
		return "", fmt.Errorf("image %s: manifest: %w", img.Name, err)
	}
	tag := img.Name
	if i := strings.LastIndex(img.Name, ":"); i > strings.LastIndex(img.Name, "/") {
		tag = img.Name[i+1:]
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaIndex,
		"manifests": []any{map[string]any{
			"mediaType": mediaManifest, "digest": digest(manifest), "size": len(manifest),
			"platform": map[string]string{"architecture": img.Arch, "os": "linux"},
			// containerd names the image after the first, other tools
			// after the second.
			"annotations": map[string]string{"io.containerd.image.name": img.Name, "org.opencontainers.image.ref.name": tag},
		}},
	})
	if err != nil {
		return "", fmt.Errorf("image %s: index: %w", img.Name, err)
	}

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", fmt.Errorf("write image %s: %w", out, err)
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	put := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.CopyN(tw, r, size)
		return err
	}
	putBytes := func(name string, b []byte) error { return put(name, int64(len(b)), bytes.NewReader(b)) }
	err = func() error {
		if err := putBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
			return err
		}
		if err := putBytes("index.json", index); err != nil {
			return err
		}
		blobs := map[string]func() error{
			digest(config):   func() error { return putBytes(blobPath(digest(config)), config) },
			digest(manifest): func() error { return putBytes(blobPath(digest(manifest)), manifest) },
		}
		for _, l := range img.Layers {
			l := l
			blobs[l.Digest] = func() error {
				lf, err := os.Open(l.Path)
				if err != nil {
					return err
				}
				defer lf.Close()
				return put(blobPath(l.Digest), l.Size, lf)
			}
		}
		names := make([]string, 0, len(blobs))
		for d := range blobs {
			names = append(names, d)
		}
		sort.Strings(names)
		for _, d := range names {
			if err := blobs[d](); err != nil {
				return err
			}
		}
		return tw.Close()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write image %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("write image %s: %w", out, err)
	}
	return digest(manifest), nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(d string) string { return filepath.Join("blobs", strings.Replace(d, ":", "/", 1)) }
