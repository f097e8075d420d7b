package main

import (
	"testing"
	"time"

	"github.com/projectcalico/calico-node/api"
)

func TestRefreshInterval(t *testing.T) {
	const def = 90 * time.Second
	tests := []struct {
		name string
		in   *api.Duration
		want time.Duration
	}{
		{"unset keeps the default", nil, def},
		{"set", &api.Duration{Duration: 2 * time.Second}, 2 * time.Second},
		{"zero keeps the default", &api.Duration{}, def},
		{"negative keeps the default", &api.Duration{Duration: -time.Second}, def},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := refreshInterval(tc.in, def); got != tc.want {
				t.Errorf("refreshInterval(%v) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
