package execpolicy_test

import (
	"fmt"
	"time"

	"github.com/agentbus/agentbus/pkg/execpolicy"
)

func ExamplePolicy_Check() {
	p, err := execpolicy.New(execpolicy.Options{
		Mode:     execpolicy.ModeAllowlist,
		Preset:   "readonly",
		Approval: execpolicy.ApprovalAsk,
	})
	if err != nil {
		panic(err)
	}
	for _, cmd := range []string{
		"cat go.mod | grep -n require",
		"timeout 5 nice -n 3 s'u'do id",
		"npm install",
	} {
		v := p.Check(cmd, nil)
		fmt.Printf("%s: %s\n", v.Decision, v.Reason)
	}
	// Output:
	// allow: allowed: cat is allowlisted; grep is allowlisted
	// deny: sudo is on the hard blocklist
	// ask: needs owner approval: npm runs code from the workspace, its configuration or packages
}

func ExampleApprovals_Apply() {
	var ap execpolicy.Approvals // loaded from KV `approvals` in production
	cmd, err := execpolicy.ParseApproveCommand(`/approve rule ^npm\s+install$`)
	if err != nil {
		panic(err)
	}
	if _, _, err := ap.Apply(cmd, execpolicy.ApplyContext{Now: time.Now(), By: "owner"}); err != nil {
		panic(err)
	}
	p, _ := execpolicy.New(execpolicy.Options{Mode: execpolicy.ModeAllowlist, Approval: execpolicy.ApprovalAsk})
	fmt.Println(p.Check("npm install", &ap).Decision)
	fmt.Println(p.Check("npm publish", &ap).Decision)

	_, err = execpolicy.ParseApproveCommand("/approve rule (")
	fmt.Println(err != nil)
	// Output:
	// allow
	// ask
	// true
}
