# syntax=docker/dockerfile:1
# Two images from one build: every binary is in both.
#   --target agentbus     (default, distroless, no shell): agentbus, ingest, turn-worker, egress
#   --target tool-worker  (Debian slim): the tool worker runs the bash tool and stdio MCP servers,
#                         which need a shell, coreutils and, for the bash sandbox, bubblewrap,
#                         util-linux (prlimit, nsenter), slirp4netns and iproute2 (the network
#                         preset's outbound stack). Under Docker's default seccomp profile
#                         bubblewrap cannot create namespaces and bash refuses to run: start this
#                         image with deploy/seccomp-toolworker.json (see docker-compose.yml).
# Both run as the same unprivileged user (uid/gid 65532, "nonroot") in /home/nonroot, whose
# data/ directory belongs to that user, so a volume mounted there (egress's transcript archive,
# the tool worker's workspace) starts out writable. Every role serves GET /healthz on
# 127.0.0.1:8081 (AGENTBUS_HEALTH_LISTEN) and the HEALTHCHECK asks it with `agentbus health`,
# which needs no shell or curl: healthy while the process is connected to NATS, JetStream
# answers and its roles run.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/bin/ ./cmd/... \
 && mkdir -p /out/home/data/workspace

FROM debian:bookworm-slim AS tool-worker
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash coreutils bubblewrap ca-certificates findutils grep sed \
      util-linux slirp4netns iproute2 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --shell /bin/bash nonroot
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/home/ /home/nonroot/
USER 65532:65532
WORKDIR /home/nonroot
ENV AGENTBUS_HEALTH_LISTEN=127.0.0.1:8081
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/agentbus", "health", "http://127.0.0.1:8081/healthz"]
ENTRYPOINT ["/usr/local/bin/tool-worker"]

FROM gcr.io/distroless/static-debian12:nonroot AS agentbus
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/home/ /home/nonroot/
USER 65532:65532
WORKDIR /home/nonroot
ENV AGENTBUS_HEALTH_LISTEN=127.0.0.1:8081
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/agentbus", "health", "http://127.0.0.1:8081/healthz"]
ENTRYPOINT ["/usr/local/bin/agentbus"]
