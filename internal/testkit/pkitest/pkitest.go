// Package pkitest writes throwaway key material for the servers tests run
// (etcd, kube-apiserver, kubelet): a CA and the certificates it issues, as
// the PEM files those servers and their clients read.
//
// Design: every key is ECDSA P-256, which every server and client library
// here accepts and which is generated in microseconds; private keys are
// written as PKCS#8. A certificate the CA issues is valid from an hour ago
// (clock skew between the test and a child process) until the CA expires.
// Serial numbers are random, so certificates issued by a CA read back from
// disk never repeat one issued before.
//
// Thread safety: a CA may issue certificates from parallel goroutines.
package pkitest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// CA is a certificate authority of one test setup.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA generates a self-signed CA named commonName, valid for validFor.
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA that Write wrote.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certDER, err := readPEM(certFile, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate %s: %w", certFile, err)
	}
	keyDER, err := readPEM(keyFile, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA key %s: %w", keyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse CA key %s: %T, want ECDSA", keyFile, k)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Write writes the CA's certificate (mode 0644: servers and clients read
// it) and its key (0600).
func (ca *CA) Write(certFile, keyFile string) error {
	if err := WriteCert(certFile, ca.Cert.Raw); err != nil {
		return err
	}
	return WriteKey(keyFile, ca.Key)
}

// Leaf is a certificate for the CA to issue.
type Leaf struct {
	Subject pkix.Name
	// Usage is ServerAuth, ClientAuth or both (a server that also dials
	// itself, as etcd does).
	Usage []x509.ExtKeyUsage
	// IPs and DNSNames are the names a serving certificate is valid for.
	IPs      []net.IP
	DNSNames []string
}

// Issue generates a key, has the CA sign a certificate for it as l
// describes, and writes both: the certificate to certFile (0644), the key
// to keyFile (0600).
func (ca *CA) Issue(l Leaf, certFile, keyFile string) error {
	what := l.Subject.CommonName
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate %s key: %w", what, err)
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      l.Subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  l.Usage,
		IPAddresses:  l.IPs,
		DNSNames:     l.DNSNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return fmt.Errorf("create %s certificate: %w", what, err)
	}
	if err := WriteCert(certFile, der); err != nil {
		return err
	}
	return WriteKey(keyFile, key)
}

// ClientTLS is the TLS configuration of a client that trusts the CA in
// caFile and presents the certificate in certFile (its key in keyFile).
func ClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// WriteCert writes a DER certificate as PEM, readable by all (0644).
func WriteCert(path string, der []byte) error {
	return writePEM(path, "CERTIFICATE", der, 0o644)
}

// WriteKey writes a private key as PKCS#8 PEM, readable by its owner only.
func WriteKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// WritePublicKey writes a public key as PKIX PEM (0644), as service-account
// token verifiers read it.
func WritePublicKey(path string, pub crypto.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("marshal public key %s: %w", path, err)
	}
	return writePEM(path, "PUBLIC KEY", der, 0o644)
}

func writePEM(path, blockType string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func readPEM(path, blockType string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != blockType {
		return nil, fmt.Errorf("read %s: no %s PEM block", path, blockType)
	}
	return b.Bytes, nil
}

// newSerial is a random 127-bit serial number (positive, as RFC 5280 asks).
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
