package kubetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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
// manager, and the service-account signing key pair.
func writePKI(dir string) (*pki, error) {
	p := &pki{
		caCert: filepath.Join(dir, "ca.crt"), caKey: filepath.Join(dir, "ca.key"),
		serverCert: filepath.Join(dir, "apiserver.crt"), serverKey: filepath.Join(dir, "apiserver.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		kcmCert: filepath.Join(dir, "kcm.crt"), kcmKey: filepath.Join(dir, "kcm.key"),
		saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	if err := writeCert(p.caCert, caDER); err != nil {
		return nil, err
	}
	if err := writeKey(p.caKey, caKey); err != nil {
		return nil, err
	}

	leaves := []struct {
		serial      int64
		subject     pkix.Name
		usage       x509.ExtKeyUsage
		server      bool
		certF, keyF string
		what        string
	}{
		{2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth, true, p.serverCert, p.serverKey, "apiserver"},
		{3, pkix.Name{CommonName: "kubetest-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, false, p.adminCert, p.adminKey, "admin"},
		{4, pkix.Name{CommonName: "system:kube-controller-manager"}, x509.ExtKeyUsageClientAuth, false, p.kcmCert, p.kcmKey, "controller manager"},
	}
	for _, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate %s key: %w", l.what, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(l.serial),
			Subject:      l.subject,
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(7 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{l.usage},
		}
		if l.server {
			tmpl.IPAddresses, tmpl.DNSNames = serverIPs, serverNames
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, fmt.Errorf("create %s certificate: %w", l.what, err)
		}
		if err := writeCert(l.certF, der); err != nil {
			return nil, err
		}
		if err := writeKey(l.keyF, key); err != nil {
			return nil, err
		}
	}

	// Service-account tokens are signed with RSA, the key type every
	// Kubernetes component and client library verifies.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	if err := writeKey(p.saKey, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	if err := writePEM(p.saPub, "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

func writeCert(path string, der []byte) error { return writePEM(path, "CERTIFICATE", der, 0o644) }

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, blockType string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
