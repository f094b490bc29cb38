"""`python -m hamimig` behaves exactly like the `hamimig` console script."""

from hamimig.cli.app import main

if __name__ == "__main__":
    main()
