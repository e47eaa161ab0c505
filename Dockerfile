# Multi-stage build: a static binary on an empty base, running as non-root.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/gatekeeper ./cmd/gatekeeper

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/gatekeeper /gatekeeper
COPY config.yaml /etc/gatekeeper/config.yaml
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/gatekeeper"]
CMD ["serve", "-config", "/etc/gatekeeper/config.yaml"]
