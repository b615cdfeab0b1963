package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/natsutil"
)

// cmdProvision creates or updates every stream and bucket on the configured bus, as a user
// allowed to (deploy: admin), so that the roles, which may not, find them (nats.provision: wait).
func cmdProvision(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	path := fs.String("config", "agentbus.yml", "config file")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long (a cluster may still be forming)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "agentbus provision — create or update every stream and bucket on nats.url (as a user allowed to,\ne.g. deploy's admin), then exit.\n\nUsage:\n  agentbus provision [flags]\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nEnvironment:\n  ${VAR} / ${VAR:-default} anywhere in the config file is expanded from the environment\n")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if cfg.NATS.Embedded {
		return fmt.Errorf("provision: nats.url is required (agentbus up provisions its embedded server itself)")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := natsutil.Connect(ctx, cfg.NATS)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	spec := natsutil.SpecFromConfig(cfg.NATS)
	if r := cfg.NATS.Region; r.Standby {
		// A standby region's "provisioning" is its mirrors; never a live stream.
		if err := natsutil.ProvisionStandby(ctx, js, spec, r.Source); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "provisioned every stream and bucket as a mirror of domain %s (standby region %s)\n", r.Source, r.Name)
		return nil
	}
	if err := natsutil.Provision(ctx, js, spec); err != nil {
		return err
	}
	if cfg.NATS.Region.Enabled() {
		if err := natsutil.ProvisionRegion(ctx, js, spec); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "provisioned every stream and bucket")
	return nil
}
