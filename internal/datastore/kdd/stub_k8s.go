package kdd

import "github.com/projectcalico/calico-node/internal/model/api"

// Placeholders until the Kubernetes-object mappers land.
func newNodeMapper(s *Store, info api.KindInfo) mapper     { return stubMapper{info} }
func newEndpointMapper(s *Store, info api.KindInfo) mapper { return stubMapper{info} }
func newProfileMapper(s *Store, info api.KindInfo) mapper  { return stubMapper{info} }
