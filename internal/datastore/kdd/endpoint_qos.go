package kdd

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Pod annotations Calico reads QoS controls from (libcalico-go
// conversion/constants.go). The Kubernetes bandwidth annotations are read
// too; Calico's own override them.
const (
	qosAnnK8sIngressBandwidth   = "kubernetes.io/ingress-bandwidth"
	qosAnnK8sEgressBandwidth    = "kubernetes.io/egress-bandwidth"
	qosAnnIngressBandwidth      = "qos.projectcalico.org/ingressBandwidth"
	qosAnnEgressBandwidth       = "qos.projectcalico.org/egressBandwidth"
	qosAnnIngressBurst          = "qos.projectcalico.org/ingressBurst"
	qosAnnEgressBurst           = "qos.projectcalico.org/egressBurst"
	qosAnnIngressPeakrate       = "qos.projectcalico.org/ingressPeakrate"
	qosAnnEgressPeakrate        = "qos.projectcalico.org/egressPeakrate"
	qosAnnIngressMinburst       = "qos.projectcalico.org/ingressMinburst"
	qosAnnEgressMinburst        = "qos.projectcalico.org/egressMinburst"
	qosAnnIngressPacketRate     = "qos.projectcalico.org/ingressPacketRate"
	qosAnnEgressPacketRate      = "qos.projectcalico.org/egressPacketRate"
	qosAnnIngressPacketBurst    = "qos.projectcalico.org/ingressPacketBurst"
	qosAnnEgressPacketBurst     = "qos.projectcalico.org/egressPacketBurst"
	qosAnnIngressMaxConnections = "qos.projectcalico.org/ingressMaxConnections"
	qosAnnEgressMaxConnections  = "qos.projectcalico.org/egressMaxConnections"
	qosAnnEgressDSCP            = "qos.projectcalico.org/dscp"
)

// qosRange is the accepted range of one QoS quantity.
type qosRange struct{ min, max int64 }

// Calico's limits: bandwidths in bits/s, bursts in bits, minburst in
// bytes, packet rates and bursts limited by xt_limit's scale (10k),
// connections by a uint32.
var (
	qosBandwidth   = qosRange{1_000, 1_000_000_000_000_000}
	qosBurst       = qosRange{1_000, math.MaxUint32 * 8}
	qosPeakrate    = qosRange{1_010, 1_010_000_000_000_000}
	qosMinburst    = qosRange{1_000, 100_000_000}
	qosPacketRate  = qosRange{1, 10_000}
	qosPacketBurst = qosRange{1, 10_000}
	qosConnections = qosRange{1, math.MaxUint32}

	qosDefaultBurst       = int64(4 << 30) // 4Gi bits
	qosDefaultPacketBurst = int64(5)
)

// podQoSControls is Calico's handleQoSControlsAnnotations: the QoS
// controls of a pod's annotations, nil when none. Out-of-range values are
// clamped and inconsistent ones dropped; the error lists them.
func podQoSControls(anns map[string]string) (*api.QoSControls, error) {
	q := &api.QoSControls{}
	var errs []error
	read := func(key string, r qosRange, dst *int64) {
		s, ok := anns[key]
		if !ok {
			return
		}
		v, err := parseQty(s, r)
		if err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", key, err))
		}
		*dst = v
	}
	read(qosAnnK8sIngressBandwidth, qosBandwidth, &q.IngressBandwidth)
	read(qosAnnK8sEgressBandwidth, qosBandwidth, &q.EgressBandwidth)
	read(qosAnnIngressBandwidth, qosBandwidth, &q.IngressBandwidth)
	read(qosAnnEgressBandwidth, qosBandwidth, &q.EgressBandwidth)
	read(qosAnnIngressBurst, qosBurst, &q.IngressBurst)
	read(qosAnnEgressBurst, qosBurst, &q.EgressBurst)
	read(qosAnnIngressPeakrate, qosPeakrate, &q.IngressPeakrate)
	read(qosAnnEgressPeakrate, qosPeakrate, &q.EgressPeakrate)
	read(qosAnnIngressMinburst, qosMinburst, &q.IngressMinburst)
	read(qosAnnEgressMinburst, qosMinburst, &q.EgressMinburst)
	read(qosAnnIngressPacketRate, qosPacketRate, &q.IngressPacketRate)
	read(qosAnnEgressPacketRate, qosPacketRate, &q.EgressPacketRate)
	read(qosAnnIngressPacketBurst, qosPacketBurst, &q.IngressPacketBurst)
	read(qosAnnEgressPacketBurst, qosPacketBurst, &q.EgressPacketBurst)
	read(qosAnnIngressMaxConnections, qosConnections, &q.IngressMaxConnections)
	read(qosAnnEgressMaxConnections, qosConnections, &q.EgressMaxConnections)

	// A setting that needs another one is dropped without it.
	needs := func(v *int64, ok bool, msg string) {
		if *v != 0 && !ok {
			errs = append(errs, errors.New(msg))
			*v = 0
		}
	}
	needs(&q.IngressBurst, q.IngressBandwidth != 0, "ingress bandwidth must be specified when ingress burst is specified")
	needs(&q.EgressBurst, q.EgressBandwidth != 0, "egress bandwidth must be specified when egress burst is specified")
	needs(&q.IngressPeakrate, q.IngressBandwidth != 0 && q.IngressBandwidth < q.IngressPeakrate, "ingress peakrate must be greater than ingress bandwidth when specified")
	needs(&q.EgressPeakrate, q.EgressBandwidth != 0 && q.EgressBandwidth < q.EgressPeakrate, "egress peakrate must be greater than egress bandwidth when specified")
	needs(&q.IngressMinburst, q.IngressPeakrate != 0, "ingress peakrate must be specified when ingress minburst is specified")
	needs(&q.EgressMinburst, q.EgressPeakrate != 0, "egress peakrate must be specified when egress minburst is specified")
	needs(&q.IngressPacketBurst, q.IngressPacketRate != 0, "ingress packet rate must be specified when ingress packet burst is specified")
	needs(&q.EgressPacketBurst, q.EgressPacketRate != 0, "egress packet rate must be specified when egress packet burst is specified")

	// Defaults (minburst's depends on the MTU: the dataplane's).
	if q.IngressBandwidth != 0 && q.IngressBurst == 0 {
		q.IngressBurst = qosDefaultBurst
	}
	if q.EgressBandwidth != 0 && q.EgressBurst == 0 {
		q.EgressBurst = qosDefaultBurst
	}
	if q.IngressPacketRate != 0 && q.IngressPacketBurst == 0 {
		q.IngressPacketBurst = qosDefaultPacketBurst
	}
	if q.EgressPacketRate != 0 && q.EgressPacketBurst == 0 {
		q.EgressPacketBurst = qosDefaultPacketBurst
	}

	if s, ok := anns[qosAnnEgressDSCP]; ok {
		if d, ok := parseDSCP(s); ok {
			q.DSCP = &d
		} else {
			errs = append(errs, fmt.Errorf("annotation %s: %q is not a DSCP value (0-63 or a class name)", qosAnnEgressDSCP, s))
		}
	}
	if *q == (api.QoSControls{}) {
		q = nil
	}
	return q, errors.Join(errs...)
}

// parseQty reads a Kubernetes quantity ("10M"), clamped to r.
func parseQty(s string, r qosRange) (int64, error) {
	qty, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	switch v := qty.Value(); {
	case v < r.min:
		return r.min, fmt.Errorf("%s is too small (less than %d), using %d", s, r.min, r.min)
	case v > r.max:
		return r.max, fmt.Errorf("%s is too large (more than %d), using %d", s, r.max, r.max)
	default:
		return v, nil
	}
}

// dscpClasses are the DSCP class names Calico accepts.
var dscpClasses = []string{
	"DF", "EF", "AF11", "AF12", "AF13", "AF21", "AF22", "AF23", "AF31", "AF32", "AF33",
	"AF41", "AF42", "AF43", "CS0", "CS1", "CS2", "CS3", "CS4", "CS5", "CS6",
}

func parseDSCP(s string) (api.DSCP, bool) {
	if n, err := strconv.ParseUint(s, 10, 8); err == nil {
		return api.DSCP{Type: api.NumOrStringNum, NumVal: uint8(n)}, n <= 63
	}
	for _, c := range dscpClasses {
		if strings.EqualFold(c, s) {
			return api.DSCP{Type: api.NumOrStringString, StrVal: s}, true
		}
	}
	return api.DSCP{}, false
}
