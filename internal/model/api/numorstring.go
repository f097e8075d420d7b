package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The number-or-string types below read and write exactly as Calico's
// api/pkg/lib/numorstring types do, so documents and datastore values
// round-trip byte for byte. Decoding only checks the syntax; ranges and
// enumerations are left to Validate so that every problem is reported with
// its path.

// isNull reports whether b is the JSON literal null. encoding/json hands
// null to UnmarshalJSON for non-pointer values; like a missing field it
// leaves the value unchanged.
func isNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// unmarshalNumOrString decodes JSON that is a number or a quoted string
// into *v: a string through fromString, a bare number through fromNumber
// (given its text). null leaves *v unchanged.
func unmarshalNumOrString[T any](b []byte, v *T, fromString, fromNumber func(string) (T, error)) error {
	if isNull(b) {
		return nil
	}
	text, parse := string(bytes.TrimSpace(b)), fromNumber
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &text); err != nil {
			return err
		}
		parse = fromString
	}
	x, err := parse(text)
	if err != nil {
		return err
	}
	*v = x
	return nil
}

// NumOrStringType says which member of a Uint8OrString is set.
type NumOrStringType int

const (
	NumOrStringNum    NumOrStringType = iota // NumVal is set
	NumOrStringString                        // StrVal is set
)

// Uint8OrString holds either an 8-bit number or a string. A string holding
// a decimal 0..255 is stored as the number.
type Uint8OrString struct {
	Type   NumOrStringType `json:"type"`
	NumVal uint8           `json:"numVal"`
	StrVal string          `json:"strVal"`
}

func (u *Uint8OrString) UnmarshalJSON(b []byte) error {
	return unmarshalNumOrString(b, u, func(s string) (Uint8OrString, error) {
		if n, err := strconv.ParseUint(s, 10, 8); err == nil {
			return Uint8OrString{Type: NumOrStringNum, NumVal: uint8(n)}, nil
		}
		return Uint8OrString{Type: NumOrStringString, StrVal: s}, nil
	}, func(num string) (Uint8OrString, error) {
		n, err := strconv.ParseUint(num, 10, 8)
		if err != nil {
			return Uint8OrString{}, fmt.Errorf("must be a number 0-255 or a string")
		}
		return Uint8OrString{Type: NumOrStringNum, NumVal: uint8(n)}, nil
	})
}

func (u Uint8OrString) MarshalJSON() ([]byte, error) {
	if n, err := u.NumValue(); err == nil {
		return json.Marshal(n)
	}
	return json.Marshal(u.StrVal)
}

func (u Uint8OrString) String() string {
	if u.Type == NumOrStringString {
		return u.StrVal
	}
	return strconv.FormatUint(uint64(u.NumVal), 10)
}

// NumValue returns the number, parsing StrVal when the string member is set.
func (u Uint8OrString) NumValue() (uint8, error) {
	if u.Type == NumOrStringString {
		n, err := strconv.ParseUint(u.StrVal, 10, 8)
		return uint8(n), err
	}
	return u.NumVal, nil
}

// Protocol names accepted by Calico v3 (case-sensitive).
const (
	ProtocolTCP     = "TCP"
	ProtocolUDP     = "UDP"
	ProtocolICMP    = "ICMP"
	ProtocolICMPv6  = "ICMPv6"
	ProtocolSCTP    = "SCTP"
	ProtocolUDPLite = "UDPLite"
)

// protocolNames lists the valid names in the order error messages show them.
var protocolNames = [...]string{ProtocolTCP, ProtocolUDP, ProtocolICMP, ProtocolICMPv6, ProtocolSCTP, ProtocolUDPLite}

// Protocol is an IP protocol given by name ("TCP") or number (6). It is
// written back in the form it was given.
type Protocol Uint8OrString

// ProtocolFromInt returns the protocol with number p.
func ProtocolFromInt(p uint8) Protocol {
	return Protocol{Type: NumOrStringNum, NumVal: p}
}

// ProtocolFromString returns the named protocol, canonicalising the case of
// the names Calico knows ("tcp" -> "TCP").
func ProtocolFromString(s string) Protocol {
	for _, n := range protocolNames {
		if strings.EqualFold(n, s) {
			return Protocol{Type: NumOrStringString, StrVal: n}
		}
	}
	return Protocol{Type: NumOrStringString, StrVal: s}
}

func (p *Protocol) UnmarshalJSON(b []byte) error {
	if err := (*Uint8OrString)(p).UnmarshalJSON(b); err != nil {
		return fmt.Errorf("protocol must be a name or a number 1-255")
	}
	return nil
}

func (p Protocol) MarshalJSON() ([]byte, error) { return Uint8OrString(p).MarshalJSON() }
func (p Protocol) String() string               { return Uint8OrString(p).String() }

// NumValue returns the protocol number when it was given as a number.
func (p Protocol) NumValue() (uint8, error) { return Uint8OrString(p).NumValue() }

// SupportsPorts reports whether rules with this protocol may match ports
// (TCP, UDP and SCTP, by name or number).
func (p Protocol) SupportsPorts() bool {
	if n, err := p.NumValue(); err == nil {
		return n == 6 || n == 17 || n == 132
	}
	switch p.StrVal {
	case ProtocolTCP, ProtocolUDP, ProtocolSCTP:
		return true
	}
	return false
}

// validate returns why p is not a valid protocol, or "".
func (p Protocol) validate() string {
	if n, err := p.NumValue(); err == nil {
		if n == 0 {
			return "is not a valid protocol number: must be 1-255"
		}
		return ""
	}
	for _, n := range protocolNames {
		if p.StrVal == n {
			return ""
		}
	}
	return "is not a valid protocol: must be one of " + strings.Join(protocolNames[:], ", ") + " or a number 1-255"
}

// Port is a single port, an inclusive range "lo:hi" or a named port. A
// single numeric port is written as a JSON number, anything else as a
// string.
type Port struct {
	MinPort  uint16 `json:"minPort,omitempty"`
	MaxPort  uint16 `json:"maxPort,omitempty"`
	PortName string `json:"portName"`
}

// SinglePort returns the port p.
func SinglePort(p uint16) Port { return Port{MinPort: p, MaxPort: p} }

// NamedPort returns the named port.
func NamedPort(name string) Port { return Port{PortName: name} }

// PortFromRange returns the range lo:hi; lo must not exceed hi.
func PortFromRange(lo, hi uint16) (Port, error) {
	if lo > hi {
		return Port{}, fmt.Errorf("port range %d:%d is reversed: the first port must not exceed the second", lo, hi)
	}
	return Port{MinPort: lo, MaxPort: hi}, nil
}

// PortFromString parses "80", "8000:9000" or a port name.
func PortFromString(s string) (Port, error) {
	if isDigits(s) {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return Port{}, fmt.Errorf("port %s is out of range: must be 0-65535", s)
		}
		return SinglePort(uint16(n)), nil
	}
	if a, b, ok := strings.Cut(s, ":"); ok && isDigits(a) && isDigits(b) {
		lo, err1 := strconv.ParseUint(a, 10, 16)
		hi, err2 := strconv.ParseUint(b, 10, 16)
		if err1 != nil || err2 != nil {
			return Port{}, fmt.Errorf("port range %s is out of range: ports must be 0-65535", s)
		}
		return PortFromRange(uint16(lo), uint16(hi))
	}
	if !isNamedPort(s) {
		return Port{}, fmt.Errorf("%q is not a port, a port range lo:hi or a port name", s)
	}
	return NamedPort(s), nil
}

func (p *Port) UnmarshalJSON(b []byte) error {
	return unmarshalNumOrString(b, p, PortFromString, func(num string) (Port, error) {
		n, err := strconv.ParseUint(num, 10, 16)
		if err != nil {
			return Port{}, fmt.Errorf("port %s is out of range: must be 0-65535", num)
		}
		return SinglePort(uint16(n)), nil
	})
}

func (p Port) MarshalJSON() ([]byte, error) {
	if p.PortName == "" && p.MinPort == p.MaxPort {
		return json.Marshal(p.MinPort)
	}
	return json.Marshal(p.String())
}

func (p Port) String() string {
	switch {
	case p.PortName != "":
		return p.PortName
	case p.MinPort == p.MaxPort:
		return strconv.FormatUint(uint64(p.MinPort), 10)
	default:
		return fmt.Sprintf("%d:%d", p.MinPort, p.MaxPort)
	}
}

// validate returns why p is not a usable port, or "".
func (p Port) validate() string {
	switch {
	case p.PortName != "":
		if p.MinPort != 0 || p.MaxPort != 0 {
			return "is invalid: a named port cannot also have numbers"
		}
	case p.MinPort > p.MaxPort:
		return "is not a valid port range: the first port must not exceed the second"
	case p.MinPort < 1:
		return "is not a valid port: port numbers must be 1-65535"
	}
	return ""
}

// ASNumber is a BGP AS number. It reads a plain number, a quoted number or
// the dotted "high.low" form ("1.10" = 65546) and always writes a number.
type ASNumber uint32

// ASNumberFromString parses "64512" or the dotted form "1.10".
func ASNumberFromString(s string) (ASNumber, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return ASNumber(n), nil
	}
	hi, lo, ok := strings.Cut(s, ".")
	if ok {
		h, err1 := strconv.ParseUint(hi, 10, 16)
		l, err2 := strconv.ParseUint(lo, 10, 16)
		if err1 == nil && err2 == nil {
			return ASNumber(h<<16 + l), nil
		}
	}
	return 0, fmt.Errorf("%q is not an AS number: want 0-4294967295 or the dotted form 0-65535.0-65535", s)
}

func (a *ASNumber) UnmarshalJSON(b []byte) error {
	return unmarshalNumOrString(b, a, ASNumberFromString, func(num string) (ASNumber, error) {
		n, err := strconv.ParseUint(num, 10, 32)
		if err != nil {
			if strings.Contains(num, ".") {
				// YAML turned an unquoted dotted AS number into a float.
				return 0, fmt.Errorf("AS number %s is not valid: quote the dotted form (\"1.10\")", num)
			}
			return 0, fmt.Errorf("AS number %s is out of range: must be 0-4294967295", num)
		}
		return ASNumber(n), nil
	})
}

func (a ASNumber) String() string { return strconv.FormatUint(uint64(a), 10) }

// DSCP is a differentiated-services code point given as a number 0-63 or a
// class name ("AF11", "EF").
type DSCP Uint8OrString

// dscpNames maps the DSCP class names Calico accepts to their values.
var dscpNames = map[string]uint8{
	"DF": 0, "EF": 46,
	"AF11": 10, "AF12": 12, "AF13": 14,
	"AF21": 18, "AF22": 20, "AF23": 22,
	"AF31": 26, "AF32": 28, "AF33": 30,
	"AF41": 34, "AF42": 36, "AF43": 38,
	"CS0": 0, "CS1": 8, "CS2": 16, "CS3": 24, "CS4": 32, "CS5": 40, "CS6": 48,
}

func (d *DSCP) UnmarshalJSON(b []byte) error {
	if err := (*Uint8OrString)(d).UnmarshalJSON(b); err != nil {
		return fmt.Errorf("DSCP must be a number 0-63 or a class name")
	}
	return nil
}

func (d DSCP) MarshalJSON() ([]byte, error) { return Uint8OrString(d).MarshalJSON() }
func (d DSCP) String() string               { return Uint8OrString(d).String() }

// Value returns the numeric code point (0 for an unknown name).
func (d DSCP) Value() uint8 {
	if n, err := Uint8OrString(d).NumValue(); err == nil {
		return n
	}
	return dscpNames[strings.ToUpper(strings.TrimSpace(d.StrVal))]
}

func (d DSCP) validate() string {
	if n, err := Uint8OrString(d).NumValue(); err == nil {
		if n > 63 {
			return "is not a valid DSCP: must be 0-63"
		}
		return ""
	}
	if _, ok := dscpNames[strings.ToUpper(strings.TrimSpace(d.StrVal))]; !ok {
		return "is not a valid DSCP class name"
	}
	return ""
}

// Duration is a time.Duration written as a Go duration string ("1m30s"),
// the JSON form of Kubernetes' metav1.Duration that Calico uses.
type Duration struct {
	time.Duration
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"90s\" or \"1m30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"90s\" or \"1m30s\"", s)
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }
