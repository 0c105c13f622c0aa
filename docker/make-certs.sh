#!/usr/bin/env bash
# Make a throw-away certificate authority and a SuperLink server certificate.
#
#   docker/make-certs.sh [OUT_DIR] [EXTRA_SAN ...]
#
# Writes OUT_DIR (default docker/certs) with ca.crt/ca.key and server.pem/server.key.
# The server certificate is valid for localhost, 127.0.0.1 and superlink (the
# compose service name); add a host name or IP per EXTRA_SAN (e.g. DNS:my-host
# or IP:10.0.0.5) when the SuperLink runs on another machine.
# For tests and private networks only: use your organisation's CA in production.
set -euo pipefail

OUT="${1:-$(dirname "$0")/certs}"
shift || true
DAYS="${CERT_DAYS:-365}"
mkdir -p "$OUT"
cd "$OUT"

SANS="DNS:localhost,IP:127.0.0.1,IP:::1,DNS:superlink"
for extra in "$@"; do SANS="$SANS,$extra"; done

openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days "$DAYS" \
  -keyout ca.key -out ca.crt -subj "/CN=flowerbed test CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

openssl req -new -newkey rsa:2048 -nodes -sha256 \
  -keyout server.key -out server.csr -subj "/CN=superlink" 2>/dev/null

cat > server.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$SANS
EXT

openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out server.pem -days "$DAYS" -sha256 -extfile server.ext 2>/dev/null

rm -f server.csr server.ext ca.srl
chmod 600 ca.key server.key
echo "certificates in $(pwd): ca.crt server.pem server.key (SANs: $SANS)"
