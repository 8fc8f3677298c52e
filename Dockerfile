# Build a static lockproxy and run it as a non-root user in an empty image.
#   docker build --build-arg VERSION=$(git describe --always) -t lockproxy .
# Run it with a password (from the environment or a secret file, never a
# flag: ps shows flags) and a real backend:
#   docker run -p 6380:6380 -e LOCKPROXY_PASSWORD=... lockproxy --nodes redis-a:6379,redis-b:6379,redis-c:6379
#   docker run -p 6380:6380 -v $PWD/pw:/run/secrets/lockproxy_password:ro lockproxy \
#       --password-file /run/secrets/lockproxy_password --nodes redis-a:6379,redis-b:6379,redis-c:6379
# Without a password, protected mode refuses every client from outside the
# container; without --nodes (or --zk) the backend is the in-memory
# development one, which says so in its log.
FROM golang:1.26-bookworm AS build
ARG VERSION=0.1.0-dev
WORKDIR /src
COPY go.mod go.sum ./
COPY third_party ./third_party
RUN go mod download
COPY . .
RUN GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/lockproxy/lockproxy/instance.Version=${VERSION}" -o /out/lockproxy ./cmd/lockproxy

FROM scratch
COPY --from=build /out/lockproxy /lockproxy
COPY config.example.toml /etc/lockproxy/config.example.toml
USER 65532:65532
EXPOSE 6380 9121
ENTRYPOINT ["/lockproxy", "--listen", "0.0.0.0:6380", "--metrics-listen", "0.0.0.0:9121"]
