#!/usr/bin/env bash
# A herder infra provider in bash, with kubectl alone: it hands out the machines of a fixed pool (a
# file of "UUID ADDRESS" lines: machines booted into Talos maintenance mode) to the MachineRequests
# labelled with its id, and takes them back when the requests go. It speaks the protocol of
# docs/providers.md: heartbeat and schema on its InfraProvider's status, its finalizer on each request,
# the request's status (its alone to write), herder's finalizer first on the way out.
#
#   KUBECONFIG=provider.kubeconfig PROVIDER_ID=bash POOL=pool.txt ./provider.sh
set -uo pipefail   # a failed call (a request gone meanwhile) is tried again on the next round
ID=${PROVIDER_ID:-bash}
POOL=${POOL:?POOL is a file of "UUID ADDRESS" lines}
TAKEN=${TAKEN:-$POOL.taken}   # "NAMESPACE/NAME UUID" of the machines handed out (survives restarts)
MINE=herder.dev/infra-provider
HERDERS=herder.dev/machine-release
touch "$TAKEN"

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

heartbeat() {
  kubectl patch infraprovider "$ID" --subresource=status --type=merge -p "{\"status\": {
    \"lastHeartbeat\": \"$(now)\", \"heartbeatIntervalSeconds\": 2, \"version\": \"1.0.0\",
    \"schema\": {\"type\": \"object\", \"additionalProperties\": false},
    \"configSchema\": {\"type\": \"object\"}}}" >/dev/null
}

report() {  # NAMESPACE NAME STATUS-JSON: the request's status, whole
  kubectl patch machinerequest "$2" -n "$1" --subresource=status --type=merge -p "{\"status\": $3}" >/dev/null
}

take() {  # NAMESPACE NAME: the UUID of the pool machine given to the request (given now if need be)
  local held uuid
  held=$(grep "^$1/$2 " "$TAKEN" | cut -d' ' -f2 || true)
  if [ -n "$held" ]; then echo "$held"; return; fi
  while read -r uuid _; do
    if ! grep -q " $uuid\$" "$TAKEN"; then echo "$1/$2 $uuid" >> "$TAKEN"; echo "$uuid"; return; fi
  done < "$POOL"
}

provision() {  # NAMESPACE NAME RESOURCEVERSION FINALIZERS
  if [[ ",$4" != *",$MINE,"* ]]; then
    # The finalizer first, and only on the version read: herder adds its own meanwhile.
    kubectl patch machinerequest "$2" -n "$1" --type=json -p "[
      {\"op\": \"test\", \"path\": \"/metadata/resourceVersion\", \"value\": \"$3\"},
      {\"op\": \"add\", \"path\": \"/metadata/finalizers\", \"value\": [$(quote "$4$MINE,")]}]" \
      >/dev/null 2>&1 || true
    return
  fi
  local uuid address
  uuid=$(take "$1" "$2")
  if [ -z "$uuid" ]; then
    report "$1" "$2" "{\"stage\": \"Pending\", \"message\": \"no free machine in the pool\"}"
    return
  fi
  address=$(grep "^$uuid " "$POOL" | cut -d' ' -f2)
  report "$1" "$2" "{\"stage\": \"Provisioned\", \"step\": \"assign\", \"stepNumber\": 1, \"steps\": 1,
    \"message\": \"pool machine $uuid\", \"machine\": {\"uuid\": \"$uuid\", \"address\": \"$address\"}}"
}

deprovision() {  # NAMESPACE NAME FINALIZERS
  if [[ ",$3" == *",$HERDERS,"* || ",$3" != *",$MINE,"* ]]; then return; fi  # herder releases first
  grep -v "^$1/$2 " "$TAKEN" > "$TAKEN.new" || true
  mv "$TAKEN.new" "$TAKEN"   # back in the pool (a real provider would wipe or destroy it)
  local others
  others=$(echo "$3" | tr ',' '\n' | grep -vx "$MINE" | grep -v '^$' | tr '\n' ',' || true)
  kubectl patch machinerequest "$2" -n "$1" --type=merge \
    -p "{\"metadata\": {\"finalizers\": [$(quote "$others")]}}" >/dev/null
}

quote() { echo "$1" | tr ',' '\n' | grep -v '^$' | sed 's/.*/"&"/' | paste -sd, - || true; }

TEMPLATE='{{range .items}}{{.metadata.namespace}} {{.metadata.name}} {{.metadata.resourceVersion}} '\
'{{if .metadata.deletionTimestamp}}deleting{{else}}live{{end}} '\
'{{if .status}}{{or .status.stage "Pending"}}{{else}}Pending{{end}} '\
'{{range .metadata.finalizers}}{{.}},{{end}}{{"\n"}}{{end}}'

while true; do
  heartbeat
  kubectl get machinerequests -A -l "herder.dev/infra-provider-id=$ID" -o go-template="$TEMPLATE" |
  while read -r ns name version phase stage finalizers; do
    if [ "$phase" = deleting ]; then deprovision "$ns" "$name" "$finalizers"
    elif [ "$stage" = Pending ]; then provision "$ns" "$name" "$version" "$finalizers"
    fi
  done
  sleep 1
done
