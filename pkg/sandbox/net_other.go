//go:build unix && !linux

package sandbox

import (
	"context"
	"errors"
	"net/netip"
	"os"
)

// BlockedNetworks: see the Linux build; NetworkOutbound exists only there.
var BlockedNetworks []netip.Prefix

type outbound struct{}

func (o *outbound) stop() {}

func resolvConf() (string, error) { return "", errors.New("sandbox: outbound network needs Linux") }

func startOutbound(ctx context.Context, iso Isolation, spec Spec, info, block *os.File) (*outbound, error) {
	info.Close()
	block.Close()
	return nil, errors.New("sandbox: outbound network needs Linux")
}

// ProtectProcess is a no-op outside Linux.
func ProtectProcess() error { return nil }
