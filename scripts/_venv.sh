# Sourced by scripts/test and scripts/example: find Python >= 3.12 (exactly
# $PYTHON_VERSION, e.g. 3.13, when set), create the virtual environment $VENV
# (default .venv next to the checkout) once, and install the project into it
# with its extras ($EXTRAS, default "test").
set -euo pipefail

find_python() {
    local versions=${PYTHON_VERSION:-"3.12 3.13 3.14"}
    local candidates=("${PYTHON:-}") version
    for version in $versions; do
        candidates+=("python$version")
        if command -v pyenv >/dev/null 2>&1; then
            candidates+=("$(pyenv root)"/versions/"$version"*/bin/python)
        fi
        candidates+=("$HOME"/.pyenv/versions/"$version"*/bin/python)
    done
    [[ -n ${PYTHON_VERSION:-} ]] || candidates+=(python3 python)
    local check="import sys; v = sys.version_info; sys.exit(v < (3, 12)"
    [[ -z ${PYTHON_VERSION:-} ]] || check+=" or f'{v.major}.{v.minor}' != '$PYTHON_VERSION'"
    local candidate
    for candidate in "${candidates[@]}"; do
        [[ -n $candidate ]] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c "$check)" 2>/dev/null; then
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
        echo "error: pytensor-jax-ofg needs Python ${PYTHON_VERSION:->= 3.12} and none was found" >&2
        echo "       (tried \$PYTHON, python${PYTHON_VERSION:-3.1x}, pyenv versions, python3)." >&2
        echo "       Install one, or point PYTHON at it: PYTHON=/path/to/python3.12 $0" >&2
        return 1 2>/dev/null || exit 1
    fi
    echo "Creating $venv with $python ($("$python" --version))"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
# Non-editable on purpose: the modules install into the installed PyTensor
# package, which an editable install cannot do.
"$venv/bin/python" -m pip install --quiet "$root[${EXTRAS:-test}]"
