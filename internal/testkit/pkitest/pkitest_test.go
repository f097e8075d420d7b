package pkitest

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A server and a client certificate issued by a CA read back from disk
// verify against that CA for their usage, as a TLS peer checks them.
func TestIssueVerifies(t *testing.T) {
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(file("ca.crt"), file("ca.key")); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(file("ca.crt"), file("ca.key"))
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !loaded.Key.Equal(ca.Key) {
		t.Fatal("LoadCA did not read back what Write wrote")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	tests := []struct {
		name    string
		leaf    Leaf
		usage   x509.ExtKeyUsage
		dnsName string
		wrong   x509.ExtKeyUsage // a usage the certificate must not pass for
	}{
		{"server", Leaf{Subject: pkix.Name{CommonName: "srv"}, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}, x509.ExtKeyUsageServerAuth, "localhost", x509.ExtKeyUsageClientAuth},
		{"client", Leaf{Subject: pkix.Name{CommonName: "cli", Organization: []string{"system:masters"}},
			Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, x509.ExtKeyUsageClientAuth, "", x509.ExtKeyUsageServerAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certF, keyF := file(tt.name+".crt"), file(tt.name+".key")
			// Issued by the CA read back from disk, as kubetest issues
			// kubelet's certificate.
			if err := loaded.Issue(tt.leaf, certF, keyF); err != nil {
				t.Fatal(err)
			}
			pair, err := tls.LoadX509KeyPair(certF, keyF)
			if err != nil {
				t.Fatalf("load key pair: %v", err)
			}
			cert := pair.Leaf
			if cert.Subject.CommonName != tt.leaf.Subject.CommonName {
				t.Errorf("subject %v, want %v", cert.Subject, tt.leaf.Subject)
			}
			opts := x509.VerifyOptions{Roots: roots, DNSName: tt.dnsName, KeyUsages: []x509.ExtKeyUsage{tt.usage}}
			if _, err := cert.Verify(opts); err != nil {
				t.Errorf("verify for its usage: %v", err)
			}
			opts.KeyUsages = []x509.ExtKeyUsage{tt.wrong}
			if _, err := cert.Verify(opts); err == nil {
				t.Error("verifies for a usage it was not issued for")
			}
			if cert.NotAfter.After(ca.Cert.NotAfter) {
				t.Errorf("outlives its CA: %v > %v", cert.NotAfter, ca.Cert.NotAfter)
			}
			if st, err := os.Stat(keyF); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
			}
		})
	}
}

// Certificates issued by a CA loaded twice never share a serial number.
func TestSerialsDiffer(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{ca.Cert.SerialNumber.String(): true}
	for i := range 3 {
		certF := filepath.Join(dir, "c.crt")
		if err := ca.Issue(Leaf{Subject: pkix.Name{CommonName: "c"}}, certF, filepath.Join(dir, "c.key")); err != nil {
			t.Fatal(err)
		}
		der, err := readPEM(certF, "CERTIFICATE")
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		if s := c.SerialNumber.String(); seen[s] {
			t.Fatalf("certificate %d repeats serial %s", i, s)
		} else {
			seen[s] = true
		}
	}
}
