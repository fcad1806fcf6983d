#!/usr/bin/env bash
# An SSH git server on loopback, the external repository a git mirror fetches from in tests: Debian's sshd, its own
# config and host key in DIR, public-key logins only, for one user whose login shell is git-shell (so a key can run
# git-upload-pack and git-receive-pack and nothing else). Tests put repositories under DIR/repos and authorized keys
# in DIR/authorized_keys.
#
# usage: hack/git-peer.sh start DIR PORT     (prints the SSH user; a new host key unless DIR/host_ed25519 exists)
#        hack/git-peer.sh stop DIR
#
# sshd must run as root to switch to that user (`slipway-git`, a system account made here on first use, home /).
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/lib.sh"
LOG_TAG=git-peer
USER_NAME=slipway-git
SSHD=/usr/sbin/sshd
GIT_SHELL=$(command -v git-shell || echo /usr/bin/git-shell)

stop() {
  local dir=$1 pid
  if [ -f "$dir/sshd.pid" ]; then
    pid=$(cat "$dir/sshd.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$dir/sshd.pid"
  fi
}

start() {
  local dir=$1 port=$2
  [ "$(id -u)" -eq 0 ] || die "sshd must run as root to log in as $USER_NAME"
  [ -x "$SSHD" ] || die "openssh-server is not installed (hack/install-deps.sh installs it)"
  [ -x "$GIT_SHELL" ] || die "git-shell is not installed (it comes with git)"
  if ! id -u "$USER_NAME" >/dev/null 2>&1; then
    useradd --system --home-dir / --no-create-home --shell "$GIT_SHELL" "$USER_NAME"
    # No password, but not locked either (sshd without PAM refuses a locked account even for a key).
    usermod -p '*' "$USER_NAME"
  fi
  mkdir -p /run/sshd "$dir/repos"
  chmod 755 "$dir" "$dir/repos"
  touch "$dir/authorized_keys"; chmod 644 "$dir/authorized_keys"
  printf '[safe]\n\tdirectory = *\n' >"$dir/gitconfig"
  [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C git-peer -f "$dir/host_ed25519"
  cat >"$dir/sshd_config" <<CONF
ListenAddress 127.0.0.1
Port $port
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $USER_NAME
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
DisableForwarding yes
PermitTTY no
AcceptEnv GIT_PROTOCOL
# The repositories belong to whoever made them (the tests); the peer serves them all.
SetEnv GIT_CONFIG_GLOBAL=$dir/gitconfig
LogLevel VERBOSE
CONF
  stop "$dir"
  "$SSHD" -D -e -f "$dir/sshd_config" >>"$dir/sshd.log" 2>&1 &
  echo $! >"$dir/sshd.pid"
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$USER_NAME"
      return
    fi
    kill -0 $! 2>/dev/null || { tail -n 20 "$dir/sshd.log" >&2; die "sshd exited"; }
    sleep 0.1
  done
  tail -n 20 "$dir/sshd.log" >&2
  die "sshd did not listen on 127.0.0.1:$port"
}

case "${1:-}" in
  start) start "${2:?DIR}" "${3:?PORT}" ;;
  stop) stop "${2:?DIR}" ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
