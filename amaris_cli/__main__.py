from amaris_cli.cli import main

main()
