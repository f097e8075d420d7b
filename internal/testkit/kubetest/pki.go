package kubetest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
)

// pki is the key material of one control plane, as files in its directory.
type pki struct {
	caCert, caKey         string
	serverCert, serverKey string
	adminCert, adminKey   string
	kcmCert, kcmKey       string
	saKey, saPub          string
}

// serverNames are what the serving certificate is valid for: loopback, and
// the in-cluster names and service IP a pod would use.
var (
	serverIPs   = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 96, 0, 1)}
	serverNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
)

// writePKI generates a CA, the apiserver's serving certificate, client
// certificates for the admin (group system:masters) and the controller
// manager, and the service-account signing key pair. The CA key is kept
// on disk too: StartNode issues kubelet's client certificate with it.
func writePKI(dir string) (*pki, error) {
	p := &pki{
		caCert: filepath.Join(dir, "ca.crt"), caKey: filepath.Join(dir, "ca.key"),
		serverCert: filepath.Join(dir, "apiserver.crt"), serverKey: filepath.Join(dir, "apiserver.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		kcmCert: filepath.Join(dir, "kcm.crt"), kcmKey: filepath.Join(dir, "kcm.key"),
		saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"),
	}
	ca, err := pkitest.NewCA("kubetest-ca", 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := ca.Write(p.caCert, p.caKey); err != nil {
		return nil, err
	}
	leaves := []struct {
		leaf        pkitest.Leaf
		certF, keyF string
	}{
		{pkitest.Leaf{Subject: pkix.Name{CommonName: "kube-apiserver"}, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPs: serverIPs, DNSNames: serverNames}, p.serverCert, p.serverKey},
		{pkitest.Leaf{Subject: pkix.Name{CommonName: "kubetest-admin", Organization: []string{"system:masters"}},
			Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, p.adminCert, p.adminKey},
		{pkitest.Leaf{Subject: pkix.Name{CommonName: "system:kube-controller-manager"},
			Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, p.kcmCert, p.kcmKey},
	}
	for _, l := range leaves {
		if err := ca.Issue(l.leaf, l.certF, l.keyF); err != nil {
			return nil, err
		}
	}

	// Service-account tokens are signed with RSA, the key type every
	// Kubernetes component and client library verifies.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	if err := pkitest.WriteKey(p.saKey, saKey); err != nil {
		return nil, err
	}
	if err := pkitest.WritePublicKey(p.saPub, &saKey.PublicKey); err != nil {
		return nil, err
	}
	return p, nil
}
