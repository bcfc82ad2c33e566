#!/bin/sh
# Regenerates gubapi/gubpb from gubernator.proto. Needs protoc (Debian:
# apt-get install protobuf-compiler) and the two Go plugins at the versions
# the generated files name:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
set -eu
cd "$(dirname "$0")/../gubapi/gubpb"
protoc --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	gubernator.proto
