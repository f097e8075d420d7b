// Package ociimage builds the calico-node container image without a
// container engine or a registry: an OCI image layout archive that
// `ctr -n k8s.io images import` (containerd, so kubelet), `podman load`
// and `skopeo copy oci-archive:` take as it is.
//
// # Model
//
// The image is what the repository's Dockerfile builds, in two layers:
//
//   - base: Debian's iptables, ipset, iproute2 and ca-certificates with
//     their dependency closure, as `apt-get install --no-install-recommends`
//     resolves it from an empty system, unpacked the way dpkg would on a
//     merged-/usr root (/bin, /sbin, /lib, /lib64 are links into /usr),
//     without documentation (as Debian's slim images), with the
//     alternatives the packages register (iptables → iptables-nft) and the
//     CA bundle update-ca-certificates would write;
//   - calico-node: /usr/bin/calico-node and its names calicoctl, calico and
//     calico-ipam (links), ENTRYPOINT ["/usr/bin/calico-node"], CMD ["run"].
//
// # Design
//
// The packages come from the host's apt sources through apt-get itself
// (its own dependency resolver, signature and hash checks), resolved
// against an empty dpkg status so nothing of the host's installed set
// leaks in, and are unpacked with dpkg-deb; no maintainer script runs. The
// .debs and the base layer are cached (CacheDir, by default
// ~/.cache/calico-node/image): a second build only re-resolves (no
// download while the host's package lists are unchanged) and writes the
// calico-node layer. Every tar entry, digest and JSON document depends
// only on the packages and the binary, so the same inputs give the same
// image digest.
//
// # Thread safety
//
// Builds serialise on a lock file in the cache directory, across
// processes.
package ociimage
