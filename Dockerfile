# syntax=docker/dockerfile:1
#
# flashgate: one static binary on a distroless base, run as non-root.
#
#   docker build -t flashgate --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) .
#   docker run --rm flashgate version
#
# The same image runs every subcommand: `gateway` (the default), `consumer`,
# `migrate`, `admin ...`. No HEALTHCHECK here on purpose: what "healthy" means
# depends on the subcommand (deploy/compose.yaml sets one per service).
#
# deploy/deploy_test.go runs this file's `go build` line as a plain build and
# checks the binary is static and stamped, so keep the build on one RUN.

# Keep in step with the go line of go.mod (the test checks it). The official
# image sets GOTOOLCHAIN=local, so an older toolchain fails instead of
# downloading a newer one.
ARG GO_VERSION=1.26

# The build stage runs on the builder's own platform and cross-compiles
# (CGO_ENABLED=0 makes that free), so multi-platform images build fast.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src

# Modules first: this layer and the cache mount survive source edits.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .
ARG TARGETOS TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/flashgate ./cmd/flashgate

# static-debian12 holds CA certificates, tzdata and /etc/passwd with the
# nonroot user (65532), and nothing else: no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/flashgate /flashgate
USER nonroot
# 8080: public listener (buyers, /healthz, /readyz); 8081: admin listener
# (admin API, /metrics). Both bind 127.0.0.1 by default: set
# FLASHGATE_HTTP_ADDR=0.0.0.0:8080, and FLASHGATE_ADMIN_ADDR together with
# FLASHGATE_ADMIN_TOKEN, to reach them from outside the container.
EXPOSE 8080 8081
ENTRYPOINT ["/flashgate"]
CMD ["gateway"]
