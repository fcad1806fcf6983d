# Shell functions the hack/ scripts share: progress lines, building Go programs from the module proxy, and
# finding and ending what a crashed run left behind. Source it after versions.sh and set LOG_TAG first.
# shellcheck shell=bash

log() { printf '[%s %s] %s\n' "${LOG_TAG:-hack}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# A throwaway module that requires the target module: "go install pkg@version" refuses modules whose go.mod has
# replace or exclude lines, and building inside a module of our own sidesteps that.
wrapper_module() {
  local dir=$1
  mkdir -p "$dir"
  [ -f "$dir/go.mod" ] || (cd "$dir" && go mod init slipway.local/wrapper >/dev/null 2>&1)
}

# go_build NAME VERSION PACKAGE...
# Builds the packages (each a main package of one module at VERSION) into $SLIPWAY_CACHE/NAME-VERSION/bin, static and
# stripped, unless every binary is already there. Extra linker flags come from $GO_LDFLAGS, build tags (comma-separated)
# from $GO_TAGS. $GO_REPLACES lists MODULE=MODULE@VERSION pins for dependencies whose wanted version the proxy
# refuses; with any, the build goes straight to a wrapper module that carries them. Prints nothing on stdout; progress
# goes to stderr.
go_build() {
  local name=$1 version=$2; shift 2
  local dir="$SLIPWAY_CACHE/$name-$version/bin" pkg missing=()
  for pkg in "$@"; do [ -x "$dir/${pkg##*/}" ] || missing+=("$pkg"); done
  if [ ${#missing[@]} -eq 0 ]; then
    log "$name $version cached in $dir"
    return
  fi
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  local ldflags="-s -w ${GO_LDFLAGS:-}" started=$SECONDS tmp tags=()
  [ -z "${GO_TAGS:-}" ] || tags=(-tags "$GO_TAGS")
  mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  log "$name $version: compiling ${missing[*]##*/} (first run only)"
  local args=()
  for pkg in "${missing[@]}"; do args+=("$pkg@$version"); done
  if [ -n "${GO_REPLACES:-}" ] || ! GOBIN="$tmp" go install -trimpath "${tags[@]}" -ldflags "$ldflags" "${args[@]}" 2>"$tmp/err"; then
    if [ -z "${GO_REPLACES:-}" ] && ! grep -qE 'replace|exclude' "$tmp/err"; then
      cat "$tmp/err" >&2; rm -rf "$tmp"; die "$name $version failed to build"
    fi
    local src="$SLIPWAY_CACHE/src/$name-$version"
    log "$name $version: building in a wrapper module at $src (replace/exclude lines or pinned dependencies)"
    wrapper_module "$src"
    local pin
    for pin in ${GO_REPLACES:-}; do (cd "$src" && go mod edit -replace "$pin"); done
    (cd "$src" && go get "${args[@]}") || { rm -rf "$tmp"; die "$name $version: go get failed"; }
    for pkg in "${missing[@]}"; do
      (cd "$src" && go build -trimpath "${tags[@]}" -ldflags "$ldflags" -o "$tmp/${pkg##*/}" "$pkg") \
        || { rm -rf "$tmp"; die "$name $version: building $pkg failed"; }
    done
  fi
  for pkg in "${missing[@]}"; do mv "$tmp/${pkg##*/}" "$dir/"; done
  rm -rf "$tmp"
  log "$name $version: done in $((SECONDS - started))s"
}

# pypi_venv VENV MODULES REQUIREMENT...: a virtualenv at VENV with REQUIREMENT (a pinned PyPI package, or pip's
# `-r FILE` of pinned ones) installed, made once; MODULES (`a, b`) must import in it. It is complete once its marker
# is there; a half-made one (an interrupted install) is made anew. One maker at a time (a lock beside it): on a cold
# machine the cluster tier and the e2e tier's background preparation both start an SMTP server and an OIDC
# provider, and two installs into one directory broke each other's.
pypi_venv() {
  local venv=$1 module=$2 lock requirement
  shift 2
  requirement="$*"
  mkdir -p "$(dirname "$venv")"
  exec {lock}>"$venv.lock"
  flock "$lock"
  if [ -f "$venv/.complete" ] && "$venv/bin/python" -c "import $module" 2>/dev/null; then
    log "$requirement cached in $venv"
  else
    log "$requirement: installing into $venv (first run only)"
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (is python3-venv installed?)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      "$@" >&2 || { rm -rf "$venv"; die "installing $requirement failed"; }
    touch "$venv/.complete"
  fi
  exec {lock}>&-
}

# Process ids whose command line mentions PATH (a state directory only our processes name), this shell excluded.
pids_naming() {
  local path=$1 p cmd
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" != "$$" ] && [ "${p#/proc/}" != "$BASHPID" ] || continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    [[ $cmd != *"$path"* ]] || echo "${p#/proc/}"
  done
}

# Stops the processes that name PATH: SIGTERM, up to 5 s, then SIGKILL.
# Signals the processes recorded in <dir>/pids/<name> for each name given.
kill_pidfiles() {
  local dir=$1 name; shift
  for name in "$@"; do
    [ ! -f "$dir/pids/$name" ] || kill "$(cat "$dir/pids/$name")" 2>/dev/null || true
  done
}

stop_naming() {
  local path=$1 pids
  pids=$(pids_naming "$path")
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  for _ in $(seq 50); do
    pids=$(pids_naming "$path")
    [ -n "$pids" ] || return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null || true
}

# Unmounts everything mounted at or below DIR, deepest first (a crashed node leaves container root filesystems,
# volume tmpfs mounts and network namespace bind mounts behind).
unmount_under() {
  local dir=$1 m
  [ -d "$dir" ] || return 0
  dir=$(readlink -f "$dir")
  for _ in 1 2 3; do
    local mounts
    mounts=$(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    [ -n "$mounts" ] || return 0
    while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done <<<"$mounts"
  done
}

# gen_cert PKI NAME SUBJECT [EXTENSIONS-FILE]: a key and a certificate signed by PKI/ca.{crt,key}.
gen_cert() {
  local pki=$1 name=$2 subj=$3 ext=${4:-}
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 365 \
    ${ext:+-extfile "$ext"} -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr"
}

# write_kubeconfig FILE SERVER PKI USER: a kubeconfig that authenticates with PKI/USER.{crt,key}.
write_kubeconfig() {
  local file=$1 server=$2 pki=$3 user=$4
  cat >"$file" <<EOT
apiVersion: v1
kind: Config
clusters:
- name: slipway-local
  cluster:
    server: $server
    certificate-authority: $pki/ca.crt
users:
- name: $user
  user:
    client-certificate: $pki/$user.crt
    client-key: $pki/$user.key
contexts:
- name: slipway-local
  context: {cluster: slipway-local, user: $user}
current-context: slipway-local
EOT
}
