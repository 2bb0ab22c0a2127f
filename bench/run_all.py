"""Same as `python -m bench`: run every benchmark (add --quick for the short version)."""

from bench.__main__ import main

if __name__ == "__main__":
    main()
