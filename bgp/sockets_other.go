//go:build !linux

package bgp

import (
	"errors"
	"net/netip"
)

type md5Prober func(peer netip.Addr) error

func probeMD5(netip.Addr) error { return errors.New("TCP MD5 signatures are only supported on Linux") }

func abortSessions(map[netip.Addr]uint16, uint16) (int, error) {
	return 0, errors.New("not supported on this platform")
}
