package upstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// RouteLogs sends go-redis's own log lines (one per failed dial to a down
// node, for instance) to log at debug level instead of stderr. go-redis's
// logger is process-wide, so the program calls this once; the quorum layer
// reports node failures that matter.
func RouteLogs(log *zap.Logger) { redis.SetLogger(zapPrintf{log}) }

type zapPrintf struct{ log *zap.Logger }

func (z zapPrintf) Printf(_ context.Context, format string, v ...any) {
	z.log.Debug("go-redis: " + fmt.Sprintf(format, v...))
}
