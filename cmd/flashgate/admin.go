package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/config"
)

const adminUsage = `usage: flashgate admin [--addr URL] [--token TOKEN] [--config FILE] COMMAND

commands:
  sale create ID --stock N [--limit N] [--starts TIME] [--ends TIME] [--payment-window S]
                 [--buckets K] [--waiting-room MODE] [--admit-per-second R] [--pass-seconds P]
  sale update ID [--stock N] [--limit N] [--starts TIME | --clear-starts] [--ends TIME | --clear-ends]
                 [--payment-window S] [--waiting-room MODE] [--admit-per-second R] [--pass-seconds P]
  sale show ID
  sale restock ID N
  sale lock ID
  sale unlock ID
  order pay SALE ORDER
  order cancel SALE ORDER
  order show SALE ORDER [--public URL]
  scripts list
  scripts reload
  health [--url URL]

flags (before or after the command):
  --addr URL     admin listener (default: http:// + FLASHGATE_ADMIN_ADDR, 127.0.0.1:8081)
  --token TOKEN  bearer token (default: FLASHGATE_ADMIN_TOKEN)
  --config FILE  settings file to read admin.addr, admin.token, http.addr from (FLASHGATE_CONFIG)
  --url URL      health only: what to probe (default: http:// + FLASHGATE_HTTP_ADDR + /readyz)
  --public URL   order show only: the public listener (default: http:// + FLASHGATE_HTTP_ADDR)

TIME is RFC 3339 (2025-11-28T09:00:00Z). S is the payment window in seconds
(0 to 86400, or a duration such as 15m; 0: orders are confirmed at once,
without payment); a change applies to orders accepted after it. MODE is
the sale's waiting room: off, fifo or random (it cannot change once the
window has started); R is the buyers it admits a second (1 to 1000000,
default 100; it may change while buyers wait) and P the seconds an
admitted buyer may buy (10 to 3600, default 120). create
refuses an existing sale and update a missing one. order pay and cancel are
idempotent (again on a paid or cancelled order: the same answer); a pay at
or after the order's pay_by is refused (409 order_expired). order show reads
the order view buyers poll, from the public listener. The answer is printed
as indented JSON. Exit status: 0 on a 2xx answer, 1 on any other answer or
no answer, 2 on bad usage.`

// adminCmd is one run of `flashgate admin`: its flags and the settings they
// fall back on.
type adminCmd struct {
	addr, token, config, url string

	cfg    *config.Config // loaded on first need
	stdout io.Writer
}

// runAdmin talks to a gateway's admin API (and, for health, to its public
// /readyz) so that an operator needs no curl.
func runAdmin(ctx context.Context, args []string, stdout io.Writer) error {
	a := &adminCmd{config: os.Getenv("FLASHGATE_CONFIG"), stdout: stdout}
	err := a.run(ctx, args)
	if errors.Is(err, flag.ErrHelp) {
		_, err = fmt.Fprintln(stdout, adminUsage)
	}
	return err
}

func (a *adminCmd) run(ctx context.Context, args []string) error {
	fs := a.flags("admin")
	if err := fs.Parse(args); err != nil {
		return adminUsageError(err)
	}
	args = fs.Args()
	if len(args) == 0 {
		return adminUsageError(errors.New("no command"))
	}
	switch args[0] {
	case "sale":
		if len(args) < 2 {
			return adminUsageError(errors.New("sale needs a command: create, update, show, restock, lock or unlock"))
		}
		switch args[1] {
		case "create":
			return a.saleUpsert(ctx, args[2:], true)
		case "update":
			return a.saleUpsert(ctx, args[2:], false)
		case "show":
			return a.saleSimple(ctx, "sale show", args[2:], (*admin.Client).Sale)
		case "lock":
			return a.saleSimple(ctx, "sale lock", args[2:], (*admin.Client).Lock)
		case "unlock":
			return a.saleSimple(ctx, "sale unlock", args[2:], (*admin.Client).Unlock)
		case "restock":
			return a.saleRestock(ctx, args[2:])
		}
		return adminUsageError(fmt.Errorf("unknown command sale %q", args[1]))
	case "order":
		if len(args) < 2 {
			return adminUsageError(errors.New("order needs a command: pay, cancel or show"))
		}
		switch args[1] {
		case "pay":
			return a.orderCall(ctx, "order pay", args[2:], (*admin.Client).Pay)
		case "cancel":
			return a.orderCall(ctx, "order cancel", args[2:], (*admin.Client).Cancel)
		case "show":
			return a.orderShow(ctx, args[2:])
		}
		return adminUsageError(fmt.Errorf("unknown command order %q", args[1]))
	case "scripts":
		if len(args) < 2 {
			return adminUsageError(errors.New("scripts needs a command: list or reload"))
		}
		switch args[1] {
		case "list":
			return a.scripts(ctx, "scripts list", args[2:], (*admin.Client).Scripts)
		case "reload":
			return a.scripts(ctx, "scripts reload", args[2:], (*admin.Client).ReloadScripts)
		}
		return adminUsageError(fmt.Errorf("unknown command scripts %q", args[1]))
	case "health":
		return a.health(ctx, args[1:])
	}
	return adminUsageError(fmt.Errorf("unknown command %q", args[0]))
}

// flags returns a flag set holding the flags every command accepts, so that
// they may come after the command too.
func (a *adminCmd) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("flashgate "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.addr, "addr", a.addr, "")
	fs.StringVar(&a.token, "token", a.token, "")
	fs.StringVar(&a.config, "config", a.config, "")
	return fs
}

func adminUsageError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v\n\n%s", errUsage, err, adminUsage)
}

// parseAdminArgs parses args, flags and positional arguments in any order,
// and returns the positional ones, checking that there are want of them.
func parseAdminArgs(fs *flag.FlagSet, args []string, want int, what string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, adminUsageError(err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) != want {
		return nil, adminUsageError(fmt.Errorf("%s: want %s", strings.TrimPrefix(fs.Name(), "flashgate "), what))
	}
	return pos, nil
}

// settings loads the settings as a gateway on this machine would read them
// (file, then environment), with --token standing for FLASHGATE_ADMIN_TOKEN.
func (a *adminCmd) settings() (*config.Config, error) {
	if a.cfg != nil {
		return a.cfg, nil
	}
	getenv := os.Getenv
	if a.token != "" {
		getenv = func(k string) string {
			if k == "FLASHGATE_ADMIN_TOKEN" {
				return a.token
			}
			return os.Getenv(k)
		}
	}
	cfg, err := config.Load(a.config, getenv)
	if err != nil {
		return nil, err
	}
	a.cfg = cfg
	return cfg, nil
}

// client returns the admin API client: --addr, else the admin listener of
// the settings; --token, else the settings' token. It is made when a
// command has parsed its arguments, so that bad usage sends nothing.
func (a *adminCmd) client() (*admin.Client, error) {
	base, token := a.addr, a.token
	if base == "" || token == "" {
		cfg, err := a.settings()
		if err != nil {
			return nil, err
		}
		if base == "" {
			base = admin.ListenerURL(cfg.Admin.Addr)
		}
		if token == "" {
			token = cfg.Admin.Token
		}
	}
	c, err := admin.New(base, token, admin.WithUserAgent(userAgent()))
	if err != nil {
		return nil, adminUsageError(fmt.Errorf("--addr %q: want http://host:port", base))
	}
	return c, nil
}

func userAgent() string { return "flashgate-admin/" + version }

// orderCall is `order pay` and `order cancel`: one admin call on one order.
func (a *adminCmd) orderCall(ctx context.Context, name string, args []string,
	call func(*admin.Client, context.Context, string, string) (*admin.Order, error)) error {
	pos, err := parseAdminArgs(a.flags(name), args, 2, "a sale id and an order id")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	o, err := call(c, ctx, pos[0], pos[1])
	if err != nil {
		return apiFailure(err)
	}
	return a.print(o.Raw)
}

// orderShow is `order show`: the order view of the public listener, which
// buyers poll (the admin API has no read of one order). No admin token
// goes there.
func (a *adminCmd) orderShow(ctx context.Context, args []string) error {
	fs := a.flags("order show")
	public := fs.String("public", "", "")
	pos, err := parseAdminArgs(fs, args, 2, "a sale id and an order id")
	if err != nil {
		return err
	}
	base := *public
	if base == "" {
		cfg, err := a.settings()
		if err != nil {
			return err
		}
		base = admin.ListenerURL(cfg.HTTP.Addr)
	}
	o, err := admin.ShowOrder(ctx, base, pos[0], pos[1], admin.WithUserAgent(userAgent()))
	if errors.Is(err, admin.ErrBaseURL) {
		return adminUsageError(fmt.Errorf("--public %q: want http://host:port", base))
	}
	if ae, ok := errors.AsType[*admin.APIError](err); ok && ae.Code == http.StatusUnauthorized {
		return fmt.Errorf("%w (buyer authentication is on: the order view wants the buyer's token)", err)
	}
	if err != nil {
		return err
	}
	return a.print(o.Raw)
}

func (a *adminCmd) scripts(ctx context.Context, name string, args []string,
	call func(*admin.Client, context.Context) (*admin.ScriptList, error)) error {
	if _, err := parseAdminArgs(a.flags(name), args, 0, "no arguments"); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	l, err := call(c, ctx)
	if err != nil {
		return apiFailure(err)
	}
	return a.print(l.Raw)
}

// health probes a gateway's public /readyz: exit 0 when ready, 1 otherwise.
// It is the container healthcheck of the distroless image, which has no
// shell and no curl.
func (a *adminCmd) health(ctx context.Context, args []string) error {
	fs := a.flags("health")
	fs.StringVar(&a.url, "url", a.url, "")
	if _, err := parseAdminArgs(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	target := a.url
	if target != "" {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return adminUsageError(fmt.Errorf("--url %q: want http://host:port/path", target))
		}
	} else {
		cfg, err := a.settings()
		if err != nil {
			return err
		}
		target = admin.ListenerURL(cfg.HTTP.Addr) + "/readyz"
	}
	body, err := admin.Ready(ctx, target, admin.WithUserAgent(userAgent()))
	if err != nil {
		return apiFailure(err)
	}
	return a.print(body)
}

// apiFailure adds to a 401 where the token comes from.
func apiFailure(err error) error {
	if ae, ok := errors.AsType[*admin.APIError](err); ok && ae.Code == http.StatusUnauthorized {
		return fmt.Errorf("%w (check --token or FLASHGATE_ADMIN_TOKEN)", err)
	}
	return err
}

// print writes an answer indented, or as it came when it is not JSON.
func (a *adminCmd) print(body []byte) error {
	var buf bytes.Buffer
	if json.Indent(&buf, bytes.TrimSpace(body), "", "  ") != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(body))
	}
	buf.WriteByte('\n')
	_, err := a.stdout.Write(buf.Bytes())
	return err
}
