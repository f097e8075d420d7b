package kubetest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
)

// PKI is the key material of one control plane, as files in its
// directory: the CA, the apiserver's serving certificate, the client
// certificates of the admin (group system:masters) and the controller
// manager, and the service-account signing key pair.
type PKI struct {
	CACert, CAKey         string
	ServerCert, ServerKey string
	AdminCert, AdminKey   string
	KCMCert, KCMKey       string
	SAKey, SAPub          string
}

// serverNames are what the serving certificate is valid for: loopback, and
// the in-cluster names and service IP a pod would use.
var (
	serverIPs   = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 96, 0, 1)}
	serverNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
)

// WritePKI generates a control plane's PKI in dir, valid for validFor,
// name prefixing the common names of the CA and the admin. The CA key is
// kept on disk too: StartNode issues kubelet's client certificate with it.
func WritePKI(dir, name string, validFor time.Duration) (*PKI, error) {
	p := &PKI{
		CACert: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key"),
		ServerCert: filepath.Join(dir, "apiserver.crt"), ServerKey: filepath.Join(dir, "apiserver.key"),
		AdminCert: filepath.Join(dir, "admin.crt"), AdminKey: filepath.Join(dir, "admin.key"),
		KCMCert: filepath.Join(dir, "kcm.crt"), KCMKey: filepath.Join(dir, "kcm.key"),
		SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	ca, err := pkitest.NewCA(name+"-ca", validFor)
	if err != nil {
		return nil, err
	}
	if err := ca.Write(p.CACert, p.CAKey); err != nil {
		return nil, err
	}
	leaves := []struct {
		leaf        pkitest.Leaf
		certF, keyF string
	}{
		{pkitest.Leaf{Subject: pkix.Name{CommonName: "kube-apiserver"}, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPs: serverIPs, DNSNames: serverNames}, p.ServerCert, p.ServerKey},
		{pkitest.Leaf{Subject: pkix.Name{CommonName: name + "-admin", Organization: []string{"system:masters"}},
			Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, p.AdminCert, p.AdminKey},
		{pkitest.Leaf{Subject: pkix.Name{CommonName: "system:kube-controller-manager"},
			Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, p.KCMCert, p.KCMKey},
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
	if err := pkitest.WriteKey(p.SAKey, saKey); err != nil {
		return nil, err
	}
	if err := pkitest.WritePublicKey(p.SAPub, &saKey.PublicKey); err != nil {
		return nil, err
	}
	return p, nil
}
