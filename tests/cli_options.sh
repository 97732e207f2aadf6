#!/usr/bin/env bash
# cli_options.sh - ferryd's options come from one table (src/server/options.c): every option it
# lists is taken by its parser, told by --help, and described in the ferryd(8) and ferryd.conf
# that the build wrote; an option outside the table is refused by name.
set -u

# shellcheck source-path=SCRIPTDIR source=lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"

BUILD_DIR=$BIN/..
MAN=$BUILD_DIR/ferryd.8
CONF=$BUILD_DIR/ferryd.conf

test_every_option_is_in_all_four() {
    local name help man conf
    run "ferryd --print-options names" 0 "$BIN/ferryd" --print-options names || return
    cp "$OUT" "$DIR/names"
    ok "the table lists the options" test "$(wc -l <"$DIR/names")" -ge 30
    help=$("$BIN/ferryd" --help)
    man=$(sed 's/\\-/-/g' "$MAN")
    conf=$(cat "$CONF")
    while read -r name; do
        ok "--help tells $name" grep -qE -- "^  $name( |$)" <<<"$help"
        ok "ferryd(8) describes $name" grep -qE -- "^\.BI? $name( |$)" <<<"$man"
        ok "ferryd.conf lists $name" grep -qE -- "^#   $name( |$)" <<<"$conf"
        # Taken by the parser: whatever it says of the value, it never calls it unknown.
        "$BIN/ferryd" --socket "$DIR/x.sock" "$name" x --no-such-option >"$OUT" 2>"$ERR"
        if grep -q "unknown option '$name'" "$ERR"; then
            fail "the parser does not take $name"
        else
            pass
        fi
    done <"$DIR/names"
}

test_an_option_outside_the_table_is_refused() {
    run "an unknown option" 2 "$BIN/ferryd" --socket "$DIR/x.sock" --no-such-option &&
        ok "it names the option" grep -q "unknown option '--no-such-option'" "$ERR"
    run "an unknown format" 2 "$BIN/ferryd" --print-options html &&
        ok "it names the formats" grep -q "none of man, conf, names" "$ERR"
}

test_every_option_is_in_all_four
test_an_option_outside_the_table_is_refused
summary
