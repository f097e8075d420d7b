package policy

import (
	"fmt"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
)

// Label prefixes and names Calico uses to carry namespace and service
// account labels onto endpoints through the kns.* and ksa.* profiles.
const (
	nsLabelPrefix = "pcns."
	saLabelPrefix = "pcsa."
)

// The selectors below are built as text exactly as libcalico-go builds them
// when it hands resources to felix (syncersv1/updateprocessors), including
// its plain text replacement of all() and global(). Building the same text
// gives the same canonical form, so the same selector IDs, IP set names and
// policy groups as Calico; evaluating it against labels that include the
// profiles' labelsToApply gives Calico's namespace and service account
// semantics.

// prefixKeys returns the canonical form of sel with prefix added to every
// label key, as libcalico-go's PrefixVisitor does.
func prefixKeys(sel selector.Selector, prefix string) string {
	canon := sel.String()
	var b strings.Builder
	// prev is the last token before the current one: "" at the start, a
	// punctuation token, or "w" after a word. A word in key position
	// (start, after "(", "&&", "||" or "!") is a label key unless a "("
	// follows it (has, all, global).
	prev := ""
	for i := 0; i < len(canon); {
		c := canon[i]
		switch {
		case c == ' ' || c == '\t':
			b.WriteByte(c)
			i++
		case c == '"' || c == '\'':
			j := strings.IndexByte(canon[i+1:], c)
			end := len(canon)
			if j >= 0 {
				end = i + 1 + j + 1
			}
			b.WriteString(canon[i:end])
			i = end
			prev = "v"
		case isKeyChar(c):
			j := i
			for j < len(canon) && isKeyChar(canon[j]) {
				j++
			}
			word := canon[i:j]
			isFunc := j < len(canon) && canon[j] == '('
			if !isFunc && (prev == "" || prev == "(" || prev == "&&" || prev == "||" || prev == "!") {
				b.WriteString(prefix)
			}
			b.WriteString(word)
			i = j
			prev = "w"
		default:
			tok := string(c)
			if i+1 < len(canon) {
				two := canon[i : i+2]
				if two == "&&" || two == "||" || two == "==" || two == "!=" {
					tok = two
				}
			}
			b.WriteString(tok)
			i += len(tok)
			prev = tok
		}
	}
	return b.String()
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '/' || c == '-'
}

// selectors caches parsed selectors for one compilation.
type selectors struct {
	cache map[string]selectorResult
}

type selectorResult struct {
	sel selector.Selector
	err error
}

func (s *selectors) parse(text string) (selector.Selector, error) {
	if r, ok := s.cache[text]; ok {
		return r.sel, r.err
	}
	// The parse error already quotes the selector text.
	sel, err := selector.Parse(text)
	s.cache[text] = selectorResult{sel, err}
	return sel, err
}

// attachPrefix parses text and returns its canonical form with prefixed
// keys (libcalico-go's parseSelectorAttachPrefix).
func (s *selectors) attachPrefix(text, prefix string) (string, error) {
	sel, err := s.parse(text)
	if err != nil {
		return "", err
	}
	return prefixKeys(sel, prefix), nil
}

// prefixAndAppend appends the prefixed form of extra to cur with "&&".
func (s *selectors) prefixAndAppend(cur, extra, prefix string) (string, error) {
	if extra == "" {
		return cur, nil
	}
	p, err := s.attachPrefix(extra, prefix)
	if err != nil {
		return "", err
	}
	if cur == "" {
		return p, nil
	}
	return fmt.Sprintf("(%s) && %s", cur, p), nil
}

// networkPolicySelector is the selector of the endpoints a NetworkPolicy
// applies to: its selector within its namespace, and its service account
// selector.
func (s *selectors) networkPolicySelector(p *api.NetworkPolicy) (string, error) {
	sel := p.Spec.Selector
	if p.Namespace != "" {
		ns := fmt.Sprintf("%s == '%s'", api.LabelNamespace, p.Namespace)
		if sel == "" {
			sel = ns
		} else {
			sel = fmt.Sprintf("(%s) && %s", sel, ns)
		}
	}
	return s.prefixAndAppend(sel, p.Spec.ServiceAccountSelector, saLabelPrefix)
}

// globalPolicySelector is the same for a GlobalNetworkPolicy, whose
// namespaceSelector limits it to the selected namespaces. libcalico-go
// rewrites all() in the whole combined text, and so do we.
func (s *selectors) globalPolicySelector(p *api.GlobalNetworkPolicy) (string, error) {
	sel := p.Spec.Selector
	var err error
	if p.Spec.NamespaceSelector != "" {
		if sel, err = s.prefixAndAppend(sel, p.Spec.NamespaceSelector, nsLabelPrefix); err != nil {
			return "", err
		}
		sel = strings.ReplaceAll(sel, "all()", "has("+api.LabelNamespace+")")
	}
	if p.Spec.ServiceAccountSelector != "" {
		if sel, err = s.prefixAndAppend(sel, p.Spec.ServiceAccountSelector, saLabelPrefix); err != nil {
			return "", err
		}
		sel = strings.ReplaceAll(sel, "all()", "has("+api.LabelServiceAccount+")")
	}
	return sel, nil
}

// entitySelector is the selector of the endpoints one side of a rule
// matches (libcalico-go's GetEntityRuleSelector): the selector, the service
// accounts and the namespace scope. A rule in a namespaced policy that
// names no namespaceSelector only matches endpoints of the policy's own
// namespace, as soon as it uses any selector field at all (notSelector
// included).
func (s *selectors) entitySelector(er *api.EntityRule, ns string) (string, error) {
	saSel := ""
	if sa := er.ServiceAccounts; sa != nil {
		var err error
		if saSel, err = s.serviceAccountSelector(sa); err != nil {
			return "", err
		}
	}
	nsSel := ""
	if er.NamespaceSelector != "" {
		var err error
		if nsSel, err = s.attachPrefix(er.NamespaceSelector, nsLabelPrefix); err != nil {
			return "", err
		}
		nsSel = strings.ReplaceAll(nsSel, "all()", "has("+api.LabelNamespace+")")
		nsSel = strings.ReplaceAll(nsSel, "global()", "!has("+api.LabelNamespace+")")
	} else if ns != "" {
		nsSel = fmt.Sprintf("%s == '%s'", api.LabelNamespace, ns)
	}
	var parts []string
	if saSel != "" {
		parts = append(parts, saSel)
	}
	if er.Selector != "" {
		parts = append(parts, er.Selector)
	}
	sel := ""
	switch len(parts) {
	case 1:
		sel = parts[0]
	case 2:
		sel = "(" + strings.Join(parts, ") && (") + ")"
	}
	if nsSel != "" && (sel != "" || er.NotSelector != "" || er.NamespaceSelector != "") {
		if sel != "" {
			sel = fmt.Sprintf("(%s) && (%s)", nsSel, sel)
		} else {
			sel = nsSel
		}
	}
	return sel, nil
}

// serviceAccountSelector turns a serviceAccounts match into a selector over
// the pcsa.* labels of ksa.* profiles and the service account label.
func (s *selectors) serviceAccountSelector(sa *api.ServiceAccountMatch) (string, error) {
	sel := ""
	if sa.Selector != "" {
		var err error
		if sel, err = s.attachPrefix(sa.Selector, saLabelPrefix); err != nil {
			return "", err
		}
	}
	if len(sa.Names) == 0 {
		return sel, nil
	}
	names, err := s.parse(fmt.Sprintf("%s in { '%s' }", api.LabelServiceAccount, strings.Join(sa.Names, "', '")))
	if err != nil {
		return "", err
	}
	if sel == "" {
		return names.String(), nil
	}
	return fmt.Sprintf("(%s) && (%s)", sel, names.String()), nil
}
