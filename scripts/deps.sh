#!/usr/bin/env bash
# Installs the system packages the tests need when they are missing, and the
# Go modules. Safe to run repeatedly; does nothing when all is present.
set -euo pipefail

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v ipset >/dev/null 2>&1 || need+=(ipset)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v bird >/dev/null 2>&1 || need+=(bird2)
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
# A real Kubernetes node for integration/kubelet (internal/testkit/kubetest):
# containerd with its CRI plugin, runc, and busybox for the test image.
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /bin/busybox ] || need+=(busybox-static)

if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "missing packages: ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# `make image` and its test take Debian's iptables, ipset and iproute2 from
# apt's package lists (internal/ociimage): make sure there are lists.
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
  else
    echo "no apt package lists: run apt-get update as root (make image needs them)" >&2
  fi
fi

go mod download
