//go:build !linux

package bgp

import (
	"errors"
	"net/netip"
)

type netlinkKernel struct{}

var errNoKernel = errors.New("kernel routes are only read on Linux")

func (netlinkKernel) routes(netip.Prefix) ([]kernelRoute, error) { return nil, errNoKernel }

func (netlinkKernel) reach(netip.Addr) (string, error) { return "", errNoKernel }
