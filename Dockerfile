# Multi-stage build of the single calico-node image. The final image holds
# the one binary plus the kernel tools the dataplane shells out to.
# `make image` assembles the same image without Docker or a registry
# (internal/ociimage): keep the two in step.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -tags urfave_cli_no_docs \
      -ldflags "-s -w -X github.com/projectcalico/calico-node/internal/buildinfo.Version=${VERSION}" \
      -o /out/calico-node . \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/portmap github.com/containernetworking/plugins/plugins/meta/portmap \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/bandwidth github.com/containernetworking/plugins/plugins/meta/bandwidth

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      iptables ipset iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/calico-node /usr/bin/calico-node
# The CNI plugins install-cni chains after calico (hostPort, bandwidth),
# taken from beside calico-node.
COPY --from=build /out/portmap /out/bandwidth /usr/bin/
# One binary, several names: argv[0] picks the entry point.
RUN ln -s calico-node /usr/bin/calicoctl \
 && ln -s calico-node /usr/bin/calico \
 && ln -s calico-node /usr/bin/calico-ipam
ENTRYPOINT ["/usr/bin/calico-node"]
CMD ["run"]
