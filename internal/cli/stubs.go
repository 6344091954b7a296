package cli

import "context"

func Serve(ctx context.Context, args []string, env Env) error  { return nil }
func Doctor(ctx context.Context, args []string, env Env) error { return nil }
func Bench(ctx context.Context, args []string, env Env) error  { return nil }
