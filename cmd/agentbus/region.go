package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/natsutil"
)

// cmdRegion runs `agentbus region promote|status` (docs/regions.md).
func cmdRegion(ctx context.Context, args []string, stdout io.Writer) error {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet(strings.TrimSpace("region "+sub), flag.ContinueOnError)
	path := fs.String("config", "agentbus.yml", "config file (its nats: block names this region's servers)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `agentbus region — regions on one JetStream domain each (docs/regions.md)

Usage:
  agentbus region status [flags]    each stream of this region: live or a mirror of which domain,
                                    its last sequence, the mirror's lag and last contact
  agentbus region promote [flags]   turn this standby region's mirrors into the live streams,
                                    create the role consumers after their checkpointed ack floors,
                                    then exit; the standby roles (nats.region.standby) start

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nEnvironment:\n  AGENTBUS_NATS_URL   NATS URL of this region (overrides nats.url)\n  ${VAR} / ${VAR:-default} anywhere in the config file is expanded from the environment\n")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if sub != "promote" && sub != "status" {
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if cfg.NATS.Embedded {
		return fmt.Errorf("region %s: nats.url is required (a region is a NATS cluster of its own)", sub)
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
	if sub == "status" {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STREAM\tSTATE\tLAST SEQ\tLAG\tLAST CONTACT")
		for _, name := range natsutil.RegionStreams(spec) {
			st, err := js.Stream(ctx, name)
			if err != nil {
				fmt.Fprintf(tw, "%s\t%v\t\t\t\n", name, err)
				continue
			}
			info := st.CachedInfo()
			state, lag, active := "live", "", ""
			if m := info.Config.Mirror; m != nil {
				state = "mirror of " + natsutil.MirrorDomain(m)
				if info.Mirror != nil {
					lag, active = fmt.Sprint(info.Mirror.Lag), info.Mirror.Active.Round(time.Millisecond).String()
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", name, state, info.State.LastSeq, lag, active)
		}
		return tw.Flush()
	}
	start := time.Now()
	rep, err := natsutil.Promote(ctx, js, spec)
	if err != nil {
		return err
	}
	promoted := 0
	for _, s := range rep.Streams {
		if s.WasMirror {
			promoted++
			fmt.Fprintf(stdout, "promoted %s at seq %d (mirror lag %d, last contact %s ago)\n", s.Name, s.LastSeq, s.Lag, s.Active.Round(time.Millisecond))
			if s.Schedules > 0 {
				fmt.Fprintf(stdout, "re-armed %d message schedules in %s\n", s.Schedules, s.Name)
			}
		}
	}
	for _, c := range rep.Consumers {
		switch {
		case c.Err != nil:
			fmt.Fprintf(stdout, "consumer %s on %s not created (its role creates it): %v\n", c.Name, c.Stream, c.Err)
		case c.Existed:
		case c.StartSeq > 0:
			fmt.Fprintf(stdout, "consumer %s on %s starts at seq %d\n", c.Name, c.Stream, c.StartSeq)
		default:
			fmt.Fprintf(stdout, "consumer %s on %s starts at the beginning (nothing acknowledged was checkpointed)\n", c.Name, c.Stream)
		}
	}
	fmt.Fprintf(stdout, "region promoted: %d of %d streams were mirrors, %d consumers, in %s\n", promoted, len(rep.Streams), len(rep.Consumers), time.Since(start).Round(time.Millisecond))
	return nil
}
