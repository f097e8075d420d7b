// Command mkimage builds the calico-node container image as an OCI
// archive, without a container engine or a registry (package ociimage):
// `make image` runs it on bin/calico-node and writes
// bin/calico-node-image.tar, which a node imports with
//
//	ctr -n k8s.io images import bin/calico-node-image.tar
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/projectcalico/calico-node/internal/ociimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run() error {
	binary := flag.String("binary", "bin/calico-node", "the calico-node binary (statically linked)")
	out := flag.String("o", "bin/calico-node-image.tar", "the OCI archive to write")
	name := flag.String("name", ociimage.DefaultName, "the image reference (the manifests' image:)")
	version := flag.String("version", "", "org.opencontainers.image.version label")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", flag.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var labels map[string]string
	if *version != "" {
		labels = map[string]string{"org.opencontainers.image.version": *version}
	}
	digest, err := ociimage.Build(ctx, ociimage.Options{Binary: *binary, Name: *name, Out: *out, Labels: labels, Progress: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", *out, *name, digest)
	fmt.Fprintf(os.Stderr, "import on a node: ctr -n k8s.io images import %s\n", *out)
	return nil
}
