# Build a static lockproxy and run it as a non-root user in an empty image.
#   docker build -t lockproxy .
#   docker run -p 6380:6380 lockproxy --backend redlock --nodes redis-a:6379,redis-b:6379,redis-c:6379
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/lockproxy ./cmd/lockproxy

FROM scratch
COPY --from=build /out/lockproxy /lockproxy
COPY config.example.toml /etc/lockproxy/config.example.toml
USER 65532:65532
EXPOSE 6380 9121
ENTRYPOINT ["/lockproxy", "--listen", "0.0.0.0:6380", "--metrics-listen", "0.0.0.0:9121"]
