# Multi-stage build: compile with the Rust toolchain, run on a slim Debian as a non-root user.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Manifests first so the dependency layer is cached across source changes.
COPY Cargo.toml Cargo.lock ./
COPY fake-llm/Cargo.toml fake-llm/Cargo.toml
RUN mkdir -p src fake-llm/src \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && echo 'fn main() {}' > fake-llm/src/main.rs && touch fake-llm/src/lib.rs \
 && cargo build --release --locked --bin switchyard \
 && rm -rf src fake-llm/src
COPY . .
# Make sure cargo rebuilds the crate whose sources replaced the stubs.
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin switchyard

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/switchyard switchyard
COPY --from=build /src/target/release/switchyard /usr/local/bin/switchyard
USER switchyard
WORKDIR /var/lib/switchyard
# Listen on all interfaces inside the container; the SQLite default lands in the home folder.
ENV SWITCHYARD__SERVER__HOST=0.0.0.0
EXPOSE 8080
ENTRYPOINT ["switchyard"]
CMD ["serve"]
