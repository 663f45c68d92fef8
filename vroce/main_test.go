package vroce_test

import (
	"testing"

	"go.uber.org/goleak"

	"vroce.dev/internal/verbstest"
	"vroce.dev/vroce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type node = verbstest.Node

var (
	waitCompletions = verbstest.WaitCompletions
	mustSucceed     = verbstest.MustSucceed
	fill            = verbstest.Fill
	defaultOpts     = verbstest.DefaultOpts
	simPair         = verbstest.SimPair
)

var _ = vroce.RC
