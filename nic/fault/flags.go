package fault

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Flags are the long options every roced traffic command takes (issue 16):
// --loss P, --dup P, --reorder P, --corrupt P and --delay DURATION, each
// either one value for both directions or "tx:V,rx:V"; --seed N; and
// --fault-rule RULE, which may be repeated.
var Flags = []string{"loss", "dup", "reorder", "corrupt", "delay", "seed", "fault-rule"}

// Usage describes Flags, for the commands' usage texts.
const Usage = `      --loss=P              Lose RoCEv2 packets with probability P (0..1); P or tx:P,rx:P
      --dup=P               Send packets twice with probability P
      --reorder=P           Hold packets back behind later ones with probability P
      --corrupt=P           Flip a random bit of packets with probability P (ICRC then wrong)
      --delay=DURATION      Delay every packet (e.g. 200us, or tx:1ms,rx:0)
      --seed=N              Seed of the random faults: the same seed, the same faults
      --fault-rule=RULE     Act on chosen packets (repeatable), e.g.
                            'tx opcode=RDMA_WRITE_MIDDLE nth=1 drop'; see docs/tools.md, "Faults"
`

// SetFlag applies one of Flags to c, with a one-line error for a bad value.
func (c *Config) SetFlag(name, value string) error {
	switch name {
	case "loss", "dup", "reorder", "corrupt":
		tx, rx, err := perDirection(name, value, func(s string) (float64, error) {
			p, err := strconv.ParseFloat(s, 64)
			if err != nil || !(p >= 0 && p <= 1) {
				return 0, fmt.Errorf("want a probability from 0 to 1")
			}
			return p, nil
		})
		if err != nil {
			return err
		}
		switch name {
		case "loss":
			c.Tx.Loss, c.Rx.Loss = tx, rx
		case "dup":
			c.Tx.Duplicate, c.Rx.Duplicate = tx, rx
		case "reorder":
			c.Tx.Reorder, c.Rx.Reorder = tx, rx
		case "corrupt":
			c.Tx.Corrupt, c.Rx.Corrupt = tx, rx
		}
	case "delay":
		tx, rx, err := perDirection(name, value, func(s string) (time.Duration, error) {
			if s == "0" {
				return 0, nil
			}
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return 0, fmt.Errorf("want a duration such as 500us or 2ms")
			}
			return d, nil
		})
		if err != nil {
			return err
		}
		c.Tx.Delay, c.Rx.Delay = tx, rx
	case "seed":
		n, err := strconv.ParseUint(value, 0, 64)
		if err != nil {
			return fmt.Errorf("--seed %q: want an unsigned number", value)
		}
		c.Seed = n
	case "fault-rule":
		r, err := ParseRule(value)
		if err != nil {
			return fmt.Errorf("--fault-rule: %w", err)
		}
		c.Rules = append(c.Rules, r)
	default:
		return fmt.Errorf("--%s: not a fault option", name)
	}
	return nil
}

// perDirection reads "V" (both directions) or "tx:V,rx:V" (either part
// may be left out: that direction gets the zero value).
func perDirection[T any](name, value string, parse func(string) (T, error)) (tx, rx T, err error) {
	if !strings.Contains(value, ":") {
		v, err := parse(value)
		if err != nil {
			return tx, rx, fmt.Errorf("--%s %q: %v", name, value, err)
		}
		return v, v, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(value, ",") {
		d, s, _ := strings.Cut(part, ":")
		v, err := parse(s)
		if err != nil {
			return tx, rx, fmt.Errorf("--%s %q: %s: %v", name, value, part, err)
		}
		if seen[d] {
			return tx, rx, fmt.Errorf("--%s %q: %s given twice", name, value, d)
		}
		seen[d] = true
		switch d {
		case "tx":
			tx = v
		case "rx":
			rx = v
		default:
			return tx, rx, fmt.Errorf("--%s %q: %q is not tx or rx", name, value, d)
		}
	}
	return tx, rx, nil
}
