package etcdtest

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"path/filepath"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
)

// pki is the throwaway key material of one TLS-enabled server. The same CA
// signs the server and the client certificate, as in a typical etcd setup.
type pki struct {
	caFile, serverCertFile, serverKeyFile, clientCertFile, clientKeyFile string
}

// writePKI generates a CA, a server certificate valid for 127.0.0.1, ::1 and
// localhost, and a client certificate, and writes them as PEM into dir.
func writePKI(dir string) (*pki, error) {
	ca, err := pkitest.NewCA("etcdtest CA", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	p := &pki{
		caFile:         filepath.Join(dir, "ca.pem"),
		serverCertFile: filepath.Join(dir, "server.pem"),
		serverKeyFile:  filepath.Join(dir, "server-key.pem"),
		clientCertFile: filepath.Join(dir, "client.pem"),
		clientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	if err := pkitest.WriteCert(p.caFile, ca.Cert.Raw); err != nil {
		return nil, err
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	// etcd also uses the server certificate as a client when it proxies
	// to itself, so it carries both usages.
	server := pkitest.Leaf{
		Subject:  pkix.Name{CommonName: "etcdtest server"},
		Usage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPs:      loopback,
		DNSNames: []string{"localhost"},
	}
	if err := ca.Issue(server, p.serverCertFile, p.serverKeyFile); err != nil {
		return nil, err
	}
	client := pkitest.Leaf{
		Subject: pkix.Name{CommonName: "etcdtest client"},
		Usage:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.Issue(client, p.clientCertFile, p.clientKeyFile); err != nil {
		return nil, err
	}
	return p, nil
}
