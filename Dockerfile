# One image, every role: the binaries differ only in which role they run.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/agentbus"]
