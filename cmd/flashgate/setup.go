package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/scripts"
)

// parseConfig parses the flags every long-running subcommand shares and
// loads the settings. extra may add flags of its own to fs.
func parseConfig(name string, args []string, extra func(fs *flag.FlagSet)) (*config.Config, error) {
	fs := flag.NewFlagSet("flashgate "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", os.Getenv("FLASHGATE_CONFIG"), "YAML settings file (FLASHGATE_CONFIG)")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		return nil, err
	}
	// The buyer key file is read and parsed at start, before any client
	// or log line: a bad one stops the command with one line naming it.
	if _, err := gateway.BuyerKey(cfg.Buyer); err != nil {
		return nil, err
	}
	return cfg, nil
}

// startService is the first step of a long-running subcommand: settings,
// then the logger (the caller defers its Sync), then the settings logged
// with secrets masked.
func startService(name string, args []string) (*config.Config, *zap.Logger, error) {
	cfg, err := parseConfig(name, args, nil)
	if err != nil {
		return nil, nil, err
	}
	log, err := newLogger(cfg)
	if err != nil {
		return nil, nil, err
	}
	logSettings(log, cfg)
	return cfg, log, nil
}

// newLogger builds the process's zap logger: JSON for production, console
// for development, sampled so that a flood of identical lines is thinned.
func newLogger(cfg *config.Config) (*zap.Logger, error) {
	var zc zap.Config
	if cfg.Log.Format == "console" {
		zc = zap.NewDevelopmentConfig()
	} else {
		zc = zap.NewProductionConfig()
	}
	lvl, err := zapcore.ParseLevel(cfg.Log.Level)
	if err != nil {
		return nil, err
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = &zap.SamplingConfig{Initial: 20, Thereafter: 100}
	zc.DisableStacktrace = true
	zc.OutputPaths = []string{"stderr"}
	return zc.Build()
}

// newRedis builds the process's Redis client from its settings
// (scripts.NewClient of scripts.ClientOptions): one Redis, or a cluster when
// more than one address is configured; one address that is a node of a
// cluster is refused at the first connection (errClusterNode).
func newRedis(cfg *config.Config) redis.UniversalClient {
	return scripts.NewClient(scripts.ClientOptions(cfg.Redis))
}

// errClusterNode is the error of every command of a one-address client
// whose server is a Redis Cluster node.
var errClusterNode = scripts.ErrClusterNode

func logSettings(log *zap.Logger, cfg *config.Config) {
	fields := cfg.Fields()
	zf := make([]zap.Field, 0, len(fields))
	for k, v := range fields {
		zf = append(zf, zap.String(k, v))
	}
	log.Info("settings", zf...)
}
