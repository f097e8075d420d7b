package api

import "strings"

// Hand-written matchers for the name syntaxes. They replace regular
// expressions so that importing this package does no work at start-up (the
// CNI plugin links it and runs once per pod) and checks stay cheap.

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func isAlnum(c byte) bool { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// allBytes reports whether s is non-empty, at most max bytes, and every
// byte satisfies ok.
func allBytes(s string, max int, ok func(byte) bool) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// isDNSLabelChars: [a-z0-9]([-a-z0-9]*[a-z0-9])?, any length.
func isDNSLabelChars(s string) bool {
	if s == "" || !isLowerAlnum(s[0]) || !isLowerAlnum(s[len(s)-1]) {
		return false
	}
	return allBytes(s, len(s), func(c byte) bool { return isLowerAlnum(c) || c == '-' })
}

// isSubdomainChars: dot-separated isDNSLabelChars, any length (Calico's
// name syntax; the 253-byte limit is checked separately).
func isSubdomainChars(s string) bool {
	for part := range strings.SplitSeq(s, ".") {
		if !isDNSLabelChars(part) {
			return false
		}
	}
	return true
}

// isQualifiedNamePart: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], any length.
func isQualifiedNamePart(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	return allBytes(s, len(s), func(c byte) bool { return isAlnum(c) || c == '-' || c == '_' || c == '.' })
}

// isContainerID: [a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?
func isContainerID(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	return allBytes(s, len(s), func(c byte) bool { return isAlnum(c) || c == '-' })
}

// isInterfaceName: [a-zA-Z0-9_.-]{1,15}
func isInterfaceName(s string) bool {
	return allBytes(s, 15, func(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == '-' })
}

// isInterfacePattern: [a-zA-Z0-9_.*-]{1,15}
func isInterfacePattern(s string) bool {
	return allBytes(s, 15, func(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == '-' || c == '*' })
}

func isIfaceFilterByte(c byte) bool {
	return isAlnum(c) || c == ':' || c == '.' || c == '_' || c == '+' || c == '-'
}

// isInterfaceFilter: [a-zA-Z0-9:._+-]{1,15}
func isInterfaceFilter(s string) bool { return allBytes(s, 15, isIfaceFilterByte) }

// isHostName: [a-zA-Z0-9:._+-]{1,64} (Prometheus listen host).
func isHostName(s string) bool { return allBytes(s, 64, isIfaceFilterByte) }

// isNamedPort: [a-zA-Z0-9_.-]{1,128} (numorstring port names).
func isNamedPort(s string) bool {
	return allBytes(s, 128, func(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == '-' })
}

// isDigits: one or more decimal digits.
func isDigits(s string) bool { return allBytes(s, len(s), isDigit) }

// isKeyValue: optional leading whitespace, a word ([A-Za-z0-9_]+), '=' and
// anything.
func isKeyValue(s string) bool {
	s = strings.TrimLeft(s, " \t\r\n\f\v")
	k, _, ok := strings.Cut(s, "=")
	return ok && allBytes(k, len(k), func(c byte) bool { return isAlnum(c) || c == '_' })
}

// isHealthComponent: [a-zA-Z0-9_ -]+
func isHealthComponent(s string) bool {
	return allBytes(s, len(s), func(c byte) bool { return isAlnum(c) || c == '_' || c == ' ' || c == '-' })
}
