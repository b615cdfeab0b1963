package execpolicy

// Check judges cmdline under the policy and the endpoint's approvals (nil
// for none). It never panics and never errors: anything it cannot judge is
// a Deny with the reason.
func (p *Policy) Check(cmdline string, ap *Approvals) Verdict {
	return Verdict{Decision: Deny, Reason: "not implemented yet"}
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.' || r == '_' || r == '-' || r == '+' || r == '/' || r == '@' || r == ':' || r == ',' || r == '[':
		default:
			return false
		}
	}
	return true
}
