package main

import (
	"context"
	"errors"
)

func demoCommand(ctx context.Context, args []string) error { return errors.New("demo: not yet") }
func tokenCommand(args []string) error                     { return errors.New("token: not yet") }
func fakePolicyCommand(ctx context.Context, args []string) error {
	return errors.New("fake-policy: not yet")
}
