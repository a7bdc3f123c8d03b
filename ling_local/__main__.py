from ling_local.cli import main

main()
