package bgp

import (
	"fmt"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestCalicoNodeRouteReflector: with the mesh off, one of our own nodes
// (routeReflectorClusterID set, selected by a BGPPeer's peerSelector) is
// the route reflector. The other nodes peer only with it and learn each
// other's blocks through it, next hop unchanged, as in Calico. On the
// Kubernetes datastore the reflector's label and cluster ID are its Node's
// projectcalico.org annotations and the peering a custom resource.
func TestCalicoNodeRouteReflector(t *testing.T) { onBothDatastores(t, testCalicoNodeRouteReflector) }

func testCalicoNodeRouteReflector(t *testing.T, f *fabric) {
	f.apply(
		poolObj("pool", "10.244.0.0/16"),
		bgpConfigObj("default", func(s *api.BGPConfigurationSpec) { s.NodeToNodeMeshEnabled = ptr(false) }),
		bgpPeerObj("peer-with-rr", api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "has(route-reflector)"}),
	)
	hr := f.host("rr", "192.0.2.1")
	h1, h2 := f.host("n1", "192.0.2.11"), f.host("n2", "192.0.2.12")
	rr := f.agent(hr, "rr")
	// Make rr a reflector before the clients start: label it and give it
	// a cluster ID, as an operator does with calicoctl.
	f.label("rr", "route-reflector", "true")
	f.setClusterID("rr", "224.0.0.1")
	a1, a2 := f.agent(h1, "n1"), f.agent(h2, "n2")

	rr.waitSessions(t, 60*time.Second, "192.0.2.11", "192.0.2.12")
	a1.waitSessions(t, 60*time.Second, "192.0.2.1")
	a2.waitSessions(t, 60*time.Second, "192.0.2.1")
	if got := a1.sessions(); len(got) != 1 {
		t.Errorf("n1 has sessions %v, want only the reflector", got)
	}
	f.affine("n1", "10.244.1.0/26")
	f.affine("n2", "10.244.2.0/26")
	waitRoutes(t, h1, 20*time.Second, map[string]string{"10.244.2.0/26": "via 192.0.2.12"})
	waitRoutes(t, h2, 20*time.Second, map[string]string{"10.244.1.0/26": "via 192.0.2.11"})
}

// setClusterID sets spec.bgp.routeReflectorClusterID on a registered Node.
func (f *fabric) setClusterID(node, id string) {
	f.t.Helper()
	f.updateNode(node, "set the cluster ID of", func(n *api.Node) error {
		if n.Spec.BGP == nil {
			// On KDD the Node is there before the agent registered on it.
			return fmt.Errorf("node %s has no BGP spec yet", node)
		}
		n.Spec.BGP.RouteReflectorClusterID = id
		return nil
	})
}
