# Sourced by scripts/test and scripts/example: find Python >= 3.12, create
# .venv next to the checkout (once) and install the project with its extras.
set -euo pipefail

find_python() {
    local candidates=("${PYTHON:-}" python3.13 python3.12)
    if command -v pyenv >/dev/null 2>&1; then
        candidates+=("$(pyenv root)"/versions/3.1[3-9]*/bin/python "$(pyenv root)"/versions/3.12*/bin/python)
    fi
    candidates+=("$HOME"/.pyenv/versions/3.1[2-9]*/bin/python python3 python)
    local candidate
    for candidate in "${candidates[@]}"; do
        [[ -n $candidate ]] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$root/.venv}
if [[ ! -x $venv/bin/python ]]; then
    if ! python=$(find_python); then
        echo "error: pytensor-jax-ofg needs Python >= 3.12 and none was found" >&2
        echo "       (tried \$PYTHON, python3.13, python3.12, pyenv versions, python3)." >&2
        echo "       Install one, or point PYTHON at it: PYTHON=/path/to/python3.12 $0" >&2
        exit 1
    fi
    echo "Creating $venv with $python"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
# Non-editable on purpose: the modules install into the installed PyTensor
# package, which an editable install cannot do.
"$venv/bin/python" -m pip install --quiet "$root[${EXTRAS:-test}]"
