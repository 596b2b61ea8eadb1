from hoststate.cli import main

main()
