package gateway

import (
	"context"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/scripts"
)

// AuditedReload wraps loader.Load with the audit event every reload leaves,
// whoever asked (the admin API, SIGHUP, the start-up load): who, and the
// SHAs before and after. The returned function blocks for the loads and is
// safe for concurrent use (Load serialises itself); it returns Load's
// errors unchanged. Pass it as Deps.Reload.
func AuditedReload(log *zap.Logger, loader *scripts.Loader) func(ctx context.Context, who string) ([]scripts.Script, error) {
	return func(ctx context.Context, who string) ([]scripts.Script, error) {
		old := loader.Scripts()
		list, err := loader.Load(ctx)
		if err != nil {
			log.Warn("audit", zap.String("action", "scripts.reload"), zap.String("who", who), zap.Error(err))
			return nil, err
		}
		log.Info("audit", zap.String("action", "scripts.reload"), zap.String("who", who),
			zap.Any("old", shas(old)), zap.Any("new", shas(list)))
		return list, nil
	}
}

func shas(list []scripts.Script) map[string]string {
	m := make(map[string]string, len(list))
	for _, s := range list {
		m[s.Name] = s.SHA
	}
	return m
}
