# syntax=docker/dockerfile:1
#
# policyrouter: one static binary on distroless, run as the nonroot user.
#
#   docker build -t policyrouter .
#   docker run --rm -p 127.0.0.1:8080:8080 \
#     -e POLICYROUTER_JWT_SECRET="$(openssl rand -hex 32)" \
#     -v "$PWD/tls:/run/secrets/tls:ro" \
#     -e POLICYROUTER_TLS_CERT=/run/secrets/tls/router.crt \
#     -e POLICYROUTER_TLS_KEY=/run/secrets/tls/router.key policyrouter
#
# Transport. On 0.0.0.0 the default command refuses plain HTTP, since bearer
# tokens would cross the network in clear text: it needs a certificate and
# its key, mounted read-only as secrets (a compose secret, a Kubernetes
# Secret volume; readable by uid 65532) and named by POLICYROUTER_TLS_CERT
# and POLICYROUTER_TLS_KEY. Renewed files are served without a restart.
# POLICYROUTER_TLS_CLIENT_CA adds mutual TLS. Behind an ingress or proxy
# that terminates TLS, set POLICYROUTER_BEHIND_TLS_PROXY=true instead.
# docker-compose.yml shows both (its profile "tls" serves HTTPS).
#
# Authentication. The default command serves on 0.0.0.0:8080 (it must: the
# container's loopback is unreachable from outside) and does NOT pass
# --insecure, so the router refuses to start until it has a token key:
#   - POLICYROUTER_JWT_SECRET, an HS256 secret of 32 bytes or more, e.g. from
#     a Kubernetes Secret or `docker run --env-file`; or
#   - a public key file mounted read-only (a compose/Swarm secret or a
#     Kubernetes Secret volume) named by POLICYROUTER_JWT_PUBLIC_KEY, e.g.
#     /run/secrets/policyrouter_jwt.pub; only the token issuer holds the
#     private key (`policyrouter token --jwt-private-key ...`).
# An open router would let anyone who reaches the port register policy URLs
# that the poller then calls, so running open must be a deliberate choice:
# docker-compose.yml makes it, for a local stack on a private network whose
# published ports are bound to the host's loopback only.
#
# The durable registry (--data-dir) goes in /data, owned by nonroot; mount a
# volume there to keep registrations across restarts.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/policyrouter ./cmd/policyrouter \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/policyrouter /policyrouter
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/policyrouter"]
CMD ["serve", "--addr", "0.0.0.0:8080"]
