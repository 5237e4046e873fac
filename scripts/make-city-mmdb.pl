#!/usr/bin/perl
# Writes a small GeoLite2-City-format database with MaxMind's own writer (Debian's
# libmaxmind-db-writer-perl), for tests: sonde's city lookups are checked against what
# `mmdblookup` reads from the same file.
#
#   scripts/make-city-mmdb.pl OUT.mmdb < networks.tsv
#
# Each input line: NETWORK<TAB>COUNTRY<TAB>CITY (e.g. `5.9.0.0/16	DE	Falkenstein`); an empty
# CITY gives a record with a country and no city, as real City databases have.
use strict;
use warnings;
use MaxMind::DB::Writer::Tree;

my $out = shift @ARGV or die "usage: $0 OUT.mmdb < networks.tsv\n";
my %types = (
    city => 'map', country => 'map', names => 'map', en => 'utf8_string',
    iso_code => 'utf8_string',
);
my $tree = MaxMind::DB::Writer::Tree->new(
    ip_version => 6, record_size => 24, database_type => 'GeoLite2-City',
    languages => ['en'], description => { en => 'sonde test City database' },
    map_key_type_callback => sub { $types{ $_[0] } },
    remove_reserved_networks => 0,
);
binmode STDIN, ':encoding(UTF-8)';
while (my $line = <STDIN>) {
    chomp $line;
    next if $line eq '' || $line =~ /^#/;
    my ($network, $country, $city) = split /\t/, $line, 3;
    my %record = (country => { iso_code => $country });
    $record{city} = { names => { en => $city } } if defined $city && $city ne '';
    $tree->insert_network($network, \%record);
}
open my $fh, '>:raw', $out or die "$out: $!\n";
$tree->write_tree($fh);
close $fh or die "$out: $!\n";
