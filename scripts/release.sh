#!/usr/bin/env bash
# scripts/release.sh: cut a zklock source release (docs: docs/development.md, "Releasing").
#
#   scripts/release.sh [--out DIR] [--rev N] [--url URL | --local] [vX.Y.Z]
#       From the tag vX.Y.Z (default: v + the ZKL_VERSION of HEAD) write, in DIR (default dist/):
#         zklock-X.Y.Z.tar.gz          git archive --prefix=zklock-X.Y.Z/ vX.Y.Z
#         zklock-X.Y.Z-N.rockspec      rockspec/zklock.rockspec.in of that tag, filled in
#         zklock-X.Y.Z-N.src.rock      luarocks pack of the two: what users install
#       Upload the tarball to the rockspec's source.url, and publish the rockspec and the .src.rock.
#   scripts/release.sh --head [--out DIR] ...
#       The same from the working tree as `git add -A` would commit it (HEAD plus uncommitted
#       and untracked, not ignored, files; the index is left alone); no tag needed.
#       CI installs the result into a fresh tree and tests it (tests/installed/check.sh).
#   scripts/release.sh --rockspec VERSION [--rev N] [--url URL]
#       Print the rockspec for VERSION (scm, or X.Y.Z) from the working tree's template.
#   scripts/release.sh --check
#       Fail unless rockspec/zklock-scm-1.rockspec, and rockspec/zklock-<ZKL_VERSION>-1.rockspec
#       if it exists, are exactly what the template gives (spec/fast/version_spec.lua runs this).
#
# The version has one source: `#define ZKL_VERSION "X.Y.Z"` in csrc/include/zklock.h. The binding
# exports it as zklock.core._VERSION, zklock._VERSION is that value, and CMake reads the header
# for libzklock's SONAME and zklock.pc. A tag whose header says another version is refused, as is
# a tree whose zklock.testing._VERSION differs, and (for a tag) one whose CHANGELOG.md has no
# "## [X.Y.Z]" section.
#
# source.url of a release rockspec: --url URL, %s standing for X.Y.Z, else $ZKL_RELEASE_URL, else
# RELEASE_URL below (where the tarballs are published; the committed rockspecs use it). --local
# makes it file://DIR/zklock-X.Y.Z.tar.gz instead, for a release that stays on this machine.
# Nothing is downloaded either way: luarocks pack reads the tarball just written (through a
# file:// copy of the rockspec), and the .src.rock gets the rockspec with the real URL.
# Installing a .src.rock never fetches: it carries the tarball.
RELEASE_URL="https://zklock.example/releases/zklock-%s.tar.gz"
set -euo pipefail

die() { echo "release.sh: $*" >&2; exit 1; }

cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODE=tag REF="" OUT="$ROOT/dist" REV=1 URL=${ZKL_RELEASE_URL:-$RELEASE_URL} URL_GIVEN=0 LOCAL=0 SPEC_VERSION=""
while [ $# -gt 0 ]; do
  case "$1" in
    --head) MODE="head" ;;
    --check) MODE=check ;;
    --rockspec) MODE=rockspec; SPEC_VERSION=${2:?--rockspec needs a version}; shift ;;
    --out) OUT=${2:?--out needs a directory}; shift ;;
    --rev) REV=${2:?--rev needs a number}; shift ;;
    --url) URL=${2:?--url needs a URL}; URL_GIVEN=1; shift ;;
    --local) LOCAL=1; URL_GIVEN=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) REF=$1 ;;
  esac
  shift
done
[[ "$REV" =~ ^[1-9][0-9]*$ ]] || die "--rev must be a positive integer, not '$REV'"

# version_of TEXT-OF-zklock.h: the ZKL_VERSION string
version_of() { sed -n 's/^#define ZKL_VERSION "\([^"]*\)".*/\1/p' | head -n1; }

# render TEMPLATE-FILE VERSION: the rockspec for VERSION ("scm" or X.Y.Z) on stdout
render() {
  local template=$1 version=$2 rs_version source
  if [ "$version" = scm ]; then
    rs_version="scm-1"
    source='  url = "git+file://.",'
  else
    [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "version must be scm or X.Y.Z, not '$version'"
    rs_version="$version-$REV"
    # shellcheck disable=SC2059
    source="  url = \"$(printf "$URL" "$version")\",
  dir = \"zklock-$version\","
  fi
  echo "-- Written by scripts/release.sh from rockspec/zklock.rockspec.in: edit the template, not this."
  # drop the template's own leading comment, then fill @VERSION@ and the @SOURCE@ line
  awk -v v="$rs_version" -v s="$source" '
    !body && /^--/ { next }
    { body = 1 }
    /^@SOURCE@$/ { print s; next }
    { gsub(/@VERSION@/, v); print }' "$template"
}

case "$MODE" in
  rockspec)
    render rockspec/zklock.rockspec.in "$SPEC_VERSION"
    exit 0 ;;
  check)
    if [ $URL_GIVEN -ne 0 ] || [ -n "${ZKL_RELEASE_URL:-}" ]; then die "--check compares against RELEASE_URL"; fi
    rc=0
    v=$(version_of <csrc/include/zklock.h)
    [ -n "$v" ] || die "no #define ZKL_VERSION in csrc/include/zklock.h"
    for want in scm "$v"; do
      if [ "$want" = scm ]; then f=rockspec/zklock-scm-1.rockspec; else f=rockspec/zklock-$v-$REV.rockspec; fi
      if [ "$want" != scm ] && [ ! -e "$f" ]; then echo "no $f (not released yet): not checked"; continue; fi
      if diff -u "$f" <(render rockspec/zklock.rockspec.in "$want") >&2; then
        echo "ok: $f is what rockspec/zklock.rockspec.in gives"
      else
        echo "FAILED: $f differs from the template's output (above); regenerate it with" \
          "scripts/release.sh --rockspec $want > $f" >&2
        rc=1
      fi
    done
    exit $rc ;;
esac

git rev-parse --git-dir >/dev/null 2>&1 || die "not in a git checkout"
if [ "$MODE" = head ]; then
  [ -z "$REF" ] || die "--head takes no tag"
  # a tree object of every file git would commit with `git add -A` (untracked ones included,
  # ignored ones not), made in a scratch copy of the index: the real index stays as it is
  INDEX=$(mktemp)
  cp "$(git rev-parse --git-path index)" "$INDEX"
  GIT_INDEX_FILE=$INDEX git add -A
  COMMIT=$(GIT_INDEX_FILE=$INDEX git write-tree)
  rm -f "$INDEX"
  LABEL="the working tree (HEAD $(git rev-parse --short HEAD)$([ "$COMMIT" = "$(git rev-parse 'HEAD^{tree}')" ] || echo ' + changes'))"
else
  if [ -z "$REF" ]; then
    REF="v$(git show HEAD:csrc/include/zklock.h | version_of)"
  fi
  case "$REF" in v*) ;; *) REF="v$REF" ;; esac
  git rev-parse -q --verify "refs/tags/$REF" >/dev/null ||
    die "no tag $REF (make it with: git tag -a $REF -m 'zklock ${REF#v}'; or use --head)"
  COMMIT=$(git rev-parse "$REF^{commit}")
  LABEL="tag $REF ($(git rev-parse --short "$COMMIT"))"
fi

VERSION=$(git show "$COMMIT:csrc/include/zklock.h" | version_of)
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "ZKL_VERSION of $LABEL is '$VERSION', not X.Y.Z"
if [ "$MODE" = tag ] && [ "$REF" != "v$VERSION" ]; then
  die "tag $REF, but csrc/include/zklock.h there says ZKL_VERSION \"$VERSION\""
fi
TESTING_VERSION=$(git show "$COMMIT:lua/zklock/testing/init.lua" |
  sed -n 's/.*_NAME = "zklock.testing", _VERSION = "\([^"]*\)".*/\1/p')
[ "$TESTING_VERSION" = "$VERSION" ] ||
  die "zklock.testing._VERSION is '$TESTING_VERSION' in $LABEL, ZKL_VERSION is '$VERSION'"
# grep -c reads all of git's output: grep -q could end first and, under pipefail, fail the
# pipeline through git's SIGPIPE although the section is there
if [ "$(git show "$COMMIT:CHANGELOG.md" | grep -c "^## \[$VERSION\]")" = 0 ]; then
  [ "$MODE" = head ] || die "CHANGELOG.md of $LABEL has no '## [$VERSION]' section"
  echo "release.sh: warning: CHANGELOG.md has no '## [$VERSION]' section" >&2
fi

NAME="zklock-$VERSION"
ROCKSPEC="$NAME-$REV.rockspec"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ $LOCAL -eq 1 ]; then URL="file://$OUT/zklock-%s.tar.gz"; fi
echo "release.sh: $NAME-$REV from $LABEL into $OUT"

git archive --format=tar.gz --prefix="$NAME/" -o "$OUT/$NAME.tar.gz" "$COMMIT"
git show "$COMMIT:rockspec/zklock.rockspec.in" >"$OUT/.template.$$"
render "$OUT/.template.$$" "$VERSION" >"$OUT/$ROCKSPEC"
# the release's own committed rockspec, if it has one, must be this very file
if [ "$URL" = "$RELEASE_URL" ] && git cat-file -e "$COMMIT:rockspec/$ROCKSPEC" 2>/dev/null; then
  if ! diff -u <(git show "$COMMIT:rockspec/$ROCKSPEC") "$OUT/$ROCKSPEC" >&2; then
    die "rockspec/$ROCKSPEC in $LABEL is not what its template gives (diff above)"
  fi
fi
# luarocks pack fetches source.url: give it a copy of the rockspec naming the local tarball, then
# put the real rockspec (same name) into the .src.rock in its place
rm -rf "$OUT/$NAME-$REV.src.rock" "$OUT/.pack"
mkdir "$OUT/.pack"
URL="file://$OUT/zklock-%s.tar.gz" render "$OUT/.template.$$" "$VERSION" >"$OUT/.pack/$ROCKSPEC"
rm -f "$OUT/.template.$$"
(cd "$OUT" && luarocks --lua-version=5.4 pack "$OUT/.pack/$ROCKSPEC" >/dev/null) ||
  die "luarocks pack $OUT/.pack/$ROCKSPEC failed"
rm -rf "$OUT/.pack"
[ -s "$OUT/$NAME-$REV.src.rock" ] || die "luarocks pack wrote no $NAME-$REV.src.rock"
(cd "$OUT" && zip -q "$NAME-$REV.src.rock" "$ROCKSPEC") || die "zip $NAME-$REV.src.rock failed"
ls -l "$OUT/$NAME.tar.gz" "$OUT/$ROCKSPEC" "$OUT/$NAME-$REV.src.rock"
