# Multi-stage build: compile with the Rust toolchain, run on a slim Debian as a non-root user.
# The image holds two programs: `switchyard` (the entrypoint) and `fake-llm`, the scripted
# chat-completions server that docker-compose's `fake` profile runs as an upstream.
#
#   docker build -t switchyard:local .
#   docker run --rm switchyard:local --version
#
# .ci/check-deploy.sh checks this file without Docker (run it after changing the workspace).

# --- deps: the workspace's dependencies alone, cached until a manifest or Cargo.lock changes.
# Cargo loads the whole workspace even to build one binary, so EVERY member listed in
# Cargo.toml's [workspace] members needs its Cargo.toml copied here and a stub for each of its
# targets (src/main.rs, src/lib.rs). When you add a member, add both lines; the check fails
# until you do.
FROM rust:1.95-slim-bookworm AS deps
WORKDIR /src
# Release builds without debug info and stripped of symbols, for a small image. Set once here,
# so the dependencies built in this stage are reused as they are by the `build` stage.
ENV CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TERM_COLOR=never
COPY Cargo.toml Cargo.lock ./
COPY fake-llm/Cargo.toml fake-llm/Cargo.toml
COPY bench/Cargo.toml bench/Cargo.toml
RUN mkdir -p src fake-llm/src bench/src \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && echo 'fn main() {}' > fake-llm/src/main.rs && touch fake-llm/src/lib.rs \
 && echo 'fn main() {}' > bench/src/main.rs \
 && cargo build --release --locked -p switchyard -p fake-llm

# --- build: the real sources over the stubs.
FROM deps AS build
# `switchyard --version` names this commit (the build context has no .git):
#   docker build --build-arg SWITCHYARD_COMMIT="$(git rev-parse --short=12 HEAD)" .
ARG SWITCHYARD_COMMIT=""
COPY . .
# The copied sources keep the modification times they have in the build context, which can
# be older than the stubs built above: touch every Rust source so that cargo rebuilds each
# workspace crate (never shipping a stub), whichever members there are.
RUN find . -path ./target -prune -o -type f -name '*.rs' -exec touch {} + \
 && cargo build --release --locked -p switchyard -p fake-llm

# --- runtime
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/switchyard switchyard
COPY --from=build /src/target/release/switchyard /src/target/release/fake-llm /usr/local/bin/
USER switchyard
WORKDIR /var/lib/switchyard
# Listen on all interfaces inside the container; the SQLite default lands in the home folder.
ENV SWITCHYARD__SERVER__HOST=0.0.0.0
EXPOSE 8080
# `switchyard probe` asks this container's instance for /readyz (database reachable,
# migrations applied), at the host and port of its configuration (environment variables).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["switchyard", "probe"]
ENTRYPOINT ["switchyard"]
CMD ["serve"]
