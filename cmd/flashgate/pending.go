package main

// Subcommands whose issue has not landed yet. Each moves to its own file
// when it does.

import (
	"context"
	"errors"
	"io"
)

var errNotYet = errors.New("not yet: this command lands with its issue")

// errDrift is returned by reconcile when Redis and MySQL disagree (exit 3).
var errDrift = errors.New("drift")

func runConsumer(context.Context, []string, io.Writer) error  { return errNotYet }
func runMigrate(context.Context, []string, io.Writer) error   { return errNotYet }
func runReconcile(context.Context, []string, io.Writer) error { return errNotYet }
