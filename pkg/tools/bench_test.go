package tools

import (
	"context"
	"fmt"
	"testing"
)

func BenchmarkAllowed(b *testing.B) {
	reg, _ := NewRegistry()
	for i := range 60 {
		var opts []Option
		switch i % 4 {
		case 1:
			opts = append(opts, WithRoles(RoleGroupAdmin, RoleGroupOwner))
		case 2:
			opts = append(opts, WithPlatforms("icqq"), WithScopes(ScopeGroup))
		case 3:
			opts = append(opts, WithRoles(RoleMaster))
		}
		_ = reg.Add(MustRaw(fmt.Sprintf("tool_%02d", i), "d", nil, func(context.Context, Call) (Result, error) { return Result{}, nil }, opts...))
	}
	env := Env{Platform: "icqq", Scope: ScopeGroup, SenderRoles: []string{RoleUser, RoleGroupAdmin}}
	b.ReportAllocs()
	for b.Loop() {
		if len(reg.Allowed(env)) != 45 {
			b.Fatal("gating changed")
		}
	}
}
